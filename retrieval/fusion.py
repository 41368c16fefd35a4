"""Hybrid ranking: fuse the full-text and the vector candidates of one search.

Both inputs are ranked best first with their raw scores:

* full-text: the score of the production SQL, ``ts_rank_cd(..., 32)`` in
  [0, 1) for a document that matches some of the query's words, plus 1 for
  one that matches all of them (``websearch_to_tsquery``), so >= 1 means
  "matched every word" (``ALL_WORDS``);
* vector: the cosine similarity of the normalized embeddings, in [-1, 1].

The fused score of a document starts from its cosine; a document the vector
search did not return gets the lowest cosine it did return minus
``missing_penalty``. Then

* a document matching every query word gets ``match_bonus``, plus
  ``specificity / n`` where n is the number of such documents (one or two
  documents containing a rare identifier is strong evidence; fifty matching
  two common words is not), plus ``rank_weight / r`` for the r-th of them in
  full-text order;
* a document matching only some words gets ``partial_weight * score``.

The every-word terms are scaled by the query's length: full weight up to
``short_query`` words, ``long_query_weight`` from ``long_query`` words on,
linear in between. Matching every word of a two-word query names what was
asked for (an option, an error, a function); a sentence-long query is a
description, and a document containing all of its words mostly does so by
chance (a conjunction of many words is rare whatever the document is about, so
its few matches would also get the largest specificity bonus), while the
embedding reads such a query well. On the evaluation's handwritten questions
(6 to 15 words; docs/benchmarks.md, "Search ranking quality") the hybrid
scored 0.385 MRR@10 against vector's 0.398 with the bonus at every length, and
0.396 with the scaled one, the rest being one question whose answer lies below
``floor``.

A document is dropped unless it matches every query word or its cosine is at
least ``floor``: nearest neighbours of nonsense, and documents that share one
common word with the query, do not come back.

Why not reciprocal rank fusion: RRF throws the scores away, so a confident
exact match (a rare flag, an error name) and a weak one-word match count the
same, and a vector list of near-random neighbours weighs as much as a strong
one (docs/benchmarks.md, "Search ranking quality", compares them). ``rrf`` is
kept as the baseline.

Pure Python, no I/O: it runs per request on a few hundred candidates.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from storage.repositories.search import ALL_WORDS as ALL_WORDS

K = TypeVar("K", bound=Hashable)

# Full-text scores at or above ALL_WORDS mean "matched every query word": the
# full-text SQL (storage.repositories.search.fulltext) adds it to such rows.

_WORD = re.compile(r"\w")


def query_words(text: str) -> int:
    """The number of words of a query for ``fuse``: whitespace-separated tokens
    with a letter or digit in them (``--dry-run`` is one, ``-`` none)."""
    return sum(1 for token in text.split() if _WORD.search(token))


@dataclass(frozen=True)
class FusionParams:
    """Parameters of ``fuse``; the defaults are the grid point with the best
    MRR@10 over all queries of benchmarks/search_eval (the removed
    ``benchmarks/ranking_bench.py`` printed it and measured its held-out
    quality by 5-fold cross-validation; docs/decisions/search.md says where it is).

    floor: cosine below which a document is dropped unless it matches every
        query word (also what keeps off-topic queries empty).
    match_bonus: added to a document that matches every query word.
    specificity: divided by the number of documents that match every word, and
        added to each of them: rare matches count more.
    rank_weight: divided by a full match's rank among the full matches (1, 2, …),
        so the full-text order among them still counts.
    partial_weight: weight of the full-text score of a document that matches
        only some words (that score is in [0, 1)).
    missing_penalty: subtracted from the lowest returned cosine to stand in for the
        cosine of a document that only the full-text search returned.
    short_query: queries of at most this many words get the every-word terms
        (``match_bonus``, ``specificity``, ``rank_weight``) in full.
    long_query: queries of at least this many words get them times
        ``long_query_weight``; the weight is linear in between.
    """

    floor: float = 0.25
    match_bonus: float = 0.2
    specificity: float = 0.3
    rank_weight: float = 0.1
    partial_weight: float = 0.0
    missing_penalty: float = 0.1
    short_query: int = 3
    long_query: int = 8
    long_query_weight: float = 0.0

    def every_word_weight(self, words: int) -> float:
        """The factor of the every-word terms for a query of ``words`` words."""
        if words <= self.short_query:
            return 1.0
        if words >= self.long_query:
            return self.long_query_weight
        share = (words - self.short_query) / (self.long_query - self.short_query)
        return 1.0 - (1.0 - self.long_query_weight) * share


DEFAULT_PARAMS = FusionParams()


def merge_candidates(
    fulltext: Sequence[tuple[K, float]], vector: Sequence[tuple[K, float]]
) -> tuple[dict[K, float], dict[K, float], list[K]]:
    """Each key's cosine and full-text score (a key listed twice counts at its
    first place), and every key once in ``fuse``'s tie order: the full-text
    list, then the vector-only keys."""
    cosines: dict[K, float] = {}
    for key, similarity in vector:
        cosines.setdefault(key, similarity)
    lexical: dict[K, float] = {}
    for key, rank in fulltext:
        lexical.setdefault(key, rank)
    return cosines, lexical, list(lexical) + [key for key in cosines if key not in lexical]


def fuse(
    fulltext: Sequence[tuple[K, float]],
    vector: Sequence[tuple[K, float]],
    *,
    limit: int,
    words: int = 1,
    params: FusionParams = DEFAULT_PARAMS,
) -> list[tuple[K, float]]:
    """The ``limit`` best documents of both candidate lists, best first, with
    their fused scores, for a query of ``words`` words (``query_words``).
    Equal scores keep the order of first appearance (full-text list first), so
    the result is deterministic. A key listed twice counts at its first (best)
    place."""
    if limit <= 0:
        return []
    cosines, lexical, keys = merge_candidates(fulltext, vector)
    n_full = sum(1 for rank in lexical.values() if rank >= ALL_WORDS)
    missing = (min(cosines.values()) if cosines else 0.0) - params.missing_penalty
    weight = params.every_word_weight(words)

    scored: list[tuple[float, int, K]] = []
    full_rank = 0
    for order, key in enumerate(keys):
        cos = cosines.get(key)
        lex = lexical.get(key)
        full = lex is not None and lex >= ALL_WORDS
        if full:
            full_rank += 1
        elif cos is None or cos < params.floor:
            continue
        score = missing if cos is None else cos
        if full:
            bonus = params.match_bonus + params.specificity / n_full
            score += weight * (bonus + params.rank_weight / full_rank)
        elif lex is not None:
            score += params.partial_weight * max(lex, 0.0)
        scored.append((-score, order, key))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [(key, -neg) for neg, _, key in scored[:limit]]


def rrf(
    fulltext: Sequence[tuple[K, float]],
    vector: Sequence[tuple[K, float]],
    *,
    limit: int,
    k: int = 60,
    fulltext_weight: float = 1.0,
    vector_weight: float = 1.0,
) -> list[tuple[K, float]]:
    """Reciprocal rank fusion, ``sum(weight / (k + rank))``; the baseline ``fuse``
    is compared with. Ties keep the order of first appearance."""
    if limit <= 0:
        return []
    scores: dict[K, float] = {}
    for weight, hits in ((fulltext_weight, fulltext), (vector_weight, vector)):
        seen: set[K] = set()
        for rank, (key, _) in enumerate(hits, 1):
            if key in seen:
                continue
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    order = {key: i for i, key in enumerate(scores)}
    ranked = sorted(scores, key=lambda key: (-scores[key], order[key]))
    return [(key, scores[key]) for key in ranked[:limit]]


# --- the hybrid of BM25 and cosine (issue 36) ---------------------------------


@dataclass(frozen=True)
class HybridParams:
    """Parameters of ``hybrid``: one weight and two product rules.

    lexical_weight: ``w`` of the convex combination ``w * x + (1 - w) *
        cosine``, ``x`` = a document's BM25 score over the best BM25 score
        of the search (max-normalised, in [0, 1]). Fixed for every query:
        chosen by parsimony (``benchmarks/ranking_eval``): the least lexical
        weight among those with which the groups of the evaluation's dev
        queries fall least below their better half (not at all, where a
        weight allows it); leaving each group out in turn checks that it
        holds for a kind of query it was not chosen on (docs/benchmarks.md,
        "Search ranking quality"; docs/decisions/search-at-scale.md, "Fusion").
        Per-query weights shaped by the BM25 scores (issue 23's coverage and
        margin) kept handing short natural-language queries to the words and
        lost to the vector half on data they were not tuned on.
    floor: a candidate whose cosine (or, missing, its stand-in) is below
        this is dropped unless it explains at least ``explains`` of the query
        lexically (BM25 / scale): nearest neighbours of nonsense, and
        documents sharing one word with it, do not come back; a rare
        identifier's documents do. Product rules for off-topic queries, not
        tuned for MRR.

    The exact-identifier rule (``names_identifier``, ``identifier_leads``)
    has no parameter: for a query naming an identifier that some document
    holds, the roles of the halves swap (``(1 - w) * x + w * cosine``).
    """

    lexical_weight: float = 0.05
    floor: float = 0.25
    explains: float = 0.5
    # What BM25 is divided by: "max", the search's best BM25 score, or
    # "scale", the query's summed IDF (LexicalIndex.scale; x capped at 1),
    # under which a best hit explaining little of a long question counts
    # little. Chosen with the weight by the evaluation.
    normalise: str = "max"

    def __post_init__(self) -> None:
        if not 0.0 <= self.lexical_weight <= 1.0:
            raise ValueError("lexical_weight must be in [0, 1]")
        if self.normalise not in ("max", "scale"):
            raise ValueError("normalise must be max or scale")


DEFAULT_HYBRID = HybridParams()

# An identifier as people paste it: snake_case, a dotted or ::-qualified name,
# a flag (-x, --dry-run), camelCase or PascalCase with an inner capital
# (XetFileData, getHTTPResponse), or letters then digits (sha256, utf8).
_IDENTIFIER = re.compile(
    r"""(?x)
    ^(?:
        -{1,2}[A-Za-z][\w-]*                      # a flag
      | [A-Za-z_]\w*(?:(?:\.|::)[A-Za-z_]\w*)+    # a qualified name
      | \w*[A-Za-z0-9]_\w*|_\w+                   # snake_case, _private
      | [A-Za-z]*[a-z][A-Z]\w*                    # camelCase / PascalCase
      | [A-Z]{2,}[a-z]\w*                         # HTTPServer
      | [A-Za-z]+\d+[A-Za-z\d]*                   # sha256, utf8, ipv6
    )$"""
)


def identifiers(text: str) -> list[str]:
    """The tokens of a query that are shaped like identifiers (``_IDENTIFIER``),
    surrounding punctuation and a trailing ``()`` stripped."""
    out = []
    for token in text.split():
        word = token.strip("\"'`,;:!?()[]{}<>")
        if word.endswith("()"):
            word = word[:-2]
        if len(word) >= 3 and _IDENTIFIER.match(word):
            out.append(word)
    return out


def names_identifier(text: str) -> bool:
    """Whether the query names an identifier: one of at most ``IDENTIFIER_WORDS``
    words is shaped like one. A sentence that mentions one in passing is a
    description, which the embedding reads well."""
    return 0 < query_words(text) <= IDENTIFIER_WORDS and bool(identifiers(text))


# Longer queries are descriptions even when they quote an identifier.
IDENTIFIER_WORDS = 4


def identifier_leads(
    text: str, lexical: Sequence[tuple[K, float]], lexical_scale: float | None
) -> bool:
    """The exact-identifier rule: the lexical half leads when the query names
    an identifier (``names_identifier``) and the best BM25 hit explains at
    least half of the query (it holds the identifier, not only its parts:
    the identifier's whole token carries most of the query's IDF). An
    embedding reads ``set_iprint`` as "set" and "print"; BM25 finds the one
    document that defines it. Without a scale (Postgres full text) the
    query's shape alone decides."""
    if not lexical or not names_identifier(text):
        return False
    if lexical_scale is None or lexical_scale <= 0:
        return True
    return max(score for _, score in lexical) / lexical_scale >= 0.5


@dataclass(frozen=True)
class Ranked:
    """A fused hit: its score and the two halves it came from (None where
    that half did not return it)."""

    key: Hashable
    score: float
    lexical: float | None
    vector: float | None


def hybrid(
    lexical: Sequence[tuple[K, float]],
    vector: Sequence[tuple[K, float]],
    *,
    limit: int,
    params: HybridParams = DEFAULT_HYBRID,
    lexical_scale: float | None = None,
    query: str = "",
) -> list[Ranked]:
    """The ``limit`` best of both candidate lists, best first.

    ``lexical`` is (key, BM25 score) best first, ``vector`` (key, cosine)
    best first. The fused score is the fixed convex combination
    ``w * x + (1 - w) * cosine`` with ``x`` = BM25 / the search's best BM25
    (max-normalised); when ``query`` names an identifier that the best BM25
    hit holds (``identifier_leads``), ``(1 - w) * x + w * cosine``: the
    words lead and the cosine orders what they tie on. A candidate missing
    from the vector list gets the lowest cosine the list holds (it ranked
    below all of them); one missing from the lexical list gets 0 there.
    ``lexical_scale`` (``LexicalIndex.scale``, the summed IDF of the query's
    terms) only serves the product rules (``HybridParams.floor``) and the
    identifier rule. Equal scores keep the order of first appearance
    (lexical list first): deterministic.

    A self-contained function of the two candidate lists: whatever is applied
    after it (a prior on the hits) takes its ``Ranked`` list as it is."""
    if limit <= 0:
        return []
    cosines, scores, keys = merge_candidates(lexical, vector)
    top = max(scores.values(), default=0.0)
    scale = lexical_scale if lexical_scale is not None and lexical_scale > 0 else top
    missing = min(cosines.values(), default=0.0)
    w = params.lexical_weight
    norm = scale if params.normalise == "scale" else top
    if identifier_leads(query, lexical, lexical_scale):
        w = 1.0 - w
    out: list[tuple[float, int, Ranked]] = []
    for order, key in enumerate(keys):
        lex = scores.get(key)
        cos = cosines.get(key)
        x = min(lex / norm, 1.0) if lex is not None and norm > 0 else 0.0
        explains = lex / scale if lex is not None and scale > 0 else 0.0
        similarity = missing if cos is None else cos
        if similarity < params.floor and explains < params.explains:
            continue
        fused = w * x + (1.0 - w) * similarity
        out.append((-fused, order, Ranked(key, fused, lex, cos)))
    out.sort(key=lambda t: (t[0], t[1]))
    return [r for _, _, r in out[:limit]]
