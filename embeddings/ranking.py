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
from collections.abc import Hashable, Iterable, Sequence
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
    MRR@10 over all queries of benchmarks/search_eval (``python -m
    benchmarks.ranking_bench`` prints it; its held-out quality is measured by
    5-fold cross-validation, docs/benchmarks.md "Search ranking quality").

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


# --- the hybrid of BM25 and cosine (issue 23) ---------------------------------


@dataclass(frozen=True)
class HybridParams:
    """Parameters of ``hybrid``.

    The fused score of a document is ``W * x**p + (1 - W) * cosine``, with
    ``x = min(bm25 / scale, LEXICAL_CAP)`` (how much of the query it
    explains) and a weight that depends on the query:

        W = min(1, coverage ** coverage_power * (lexical_weight + margin_weight * margin))

    where ``coverage`` is ``x`` of the best lexical hit of the search, capped
    at 1 (the share of the query's IDF mass that the best BM25 match
    explains), and ``margin`` is ``1 - x2 / x1`` of the two best lexical hits
    (1 when only one document matches): how decisive the best match is.

    lexical_weight: the lexical half's share for a query that some document
        explains completely but not decisively (several documents hold all
        of its words: the words of a short query, a common name).
    coverage_power: how fast the share falls as the best match explains
        less of the query: at 8, a best match explaining 90 % of it keeps
        0.43 of it, 70 % keeps 0.06. A paraphrase or a long question, whose
        words no document holds all of, is ranked by its cosine (nearly)
        alone, where BM25's partial matches mislead. 0: the coverage does not
        count.
    margin_weight: how much the share grows with the best match's lead over
        the second: a rare identifier, a flag or a constant that one
        document holds and the others share only a part of (``stop_event``
        against documents with ``stop`` or ``event``) is nearly always the
        answer, whatever the embedding (which reads identifiers poorly)
        says. 0: the fusion before the margin (issue 23, first round).
    All three chosen on the dev queries of every evaluation set
    (docs/benchmarks.md, "Search ranking quality").
    lexical_power: ``p``, the power of each document's own ``x``; fixed at 1
        (the grid no longer varies it: three parameters at most).
    floor: a candidate whose cosine (or, missing, its stand-in) is below this
        is dropped unless it explains at least ``explains`` of the query
        lexically (BM25 / scale): nearest neighbours of nonsense, and
        documents sharing one word with it, do not come back; a rare
        identifier's documents do. Product rules for off-topic queries, not
        tuned for MRR.
    """

    lexical_weight: float = 0.0
    coverage_power: float = 8.0
    margin_weight: float = 6.0
    lexical_power: float = 1.0
    floor: float = 0.25
    explains: float = 0.5

    def weight(self, coverage: float, margin: float = 0.0) -> float:
        """The lexical half's weight for a search whose best lexical hit
        explains ``coverage`` of the query and leads the second by
        ``margin`` (``1 - x2 / x1``); both clamped to [0, 1], the weight too."""
        c = min(max(coverage, 0.0), 1.0)
        m = min(max(margin, 0.0), 1.0)
        return min(1.0, c**self.coverage_power * (self.lexical_weight + self.margin_weight * m))


DEFAULT_HYBRID = HybridParams()
# A document can score above the scale (a term many times); capped so that
# one repeated word cannot outweigh everything else.
LEXICAL_CAP = 1.5


@dataclass(frozen=True)
class Ranked:
    """A fused hit: its score and the two halves it came from (None where
    that half did not return it)."""

    key: Hashable
    score: float
    lexical: float | None
    vector: float | None


def lead(scores: Iterable[float], scale: float) -> tuple[float, float]:
    """(coverage, margin) of a search's lexical scores for ``HybridParams.weight``:
    the best score over ``scale`` (how much of the query the best hit
    explains), and ``1 - x2 / x1`` of the two best ``x = min(score / scale,
    LEXICAL_CAP)`` (1 with a single hit, 0 with none): how far the best hit
    leads the second."""
    if scale <= 0:
        return 0.0, 0.0
    x1 = x2 = 0.0
    for score in scores:
        x = min(score / scale, LEXICAL_CAP)
        if x > x1:
            x1, x2 = x, x1
        elif x > x2:
            x2 = x
    return x1, (1.0 - x2 / x1 if x1 > 0 else 0.0)


def hybrid(
    lexical: Sequence[tuple[K, float]],
    vector: Sequence[tuple[K, float]],
    *,
    limit: int,
    params: HybridParams = DEFAULT_HYBRID,
    lexical_scale: float | None = None,
) -> list[Ranked]:
    """The ``limit`` best of both candidate lists, best first.

    ``lexical`` is (key, BM25 score) best first, ``vector`` (key, cosine)
    best first. The fused score is a convex combination of the BM25 score
    divided by ``lexical_scale`` (capped, to a power) and the cosine, whose
    weight grows with how much of the query the best BM25 hit explains and
    with how far it leads the second (``HybridParams``, ``lead``). The scale is the score of a
    document holding every query term once (``LexicalIndex.scale``, the sum
    of the terms' IDF): about 1 for a document that explains the whole query,
    little for one sharing a common word with it, whatever the best match
    of this search. Without a scale (Postgres full text) the best lexical
    score of the search is the scale (so the best hit's coverage is 1). A
    candidate missing from the vector list
    gets the lowest cosine the list holds (it ranked below all of them); one
    missing from the lexical list gets 0 there (it contains no query word, or
    fewer than the lexical list's last). Equal scores keep the order of first
    appearance (lexical list first): deterministic."""
    if limit <= 0:
        return []
    cosines, scores, keys = merge_candidates(lexical, vector)
    top = max(scores.values(), default=0.0)
    best = lexical_scale if lexical_scale is not None and lexical_scale > 0 else top
    missing = min(cosines.values(), default=0.0)
    w = params.weight(*lead(scores.values(), best))
    out: list[tuple[float, int, Ranked]] = []
    for order, key in enumerate(keys):
        lex = scores.get(key)
        cos = cosines.get(key)
        share = min(lex / best, LEXICAL_CAP) if lex is not None and best > 0 else 0.0
        similarity = missing if cos is None else cos
        if similarity < params.floor and share < params.explains:
            continue
        fused = w * share**params.lexical_power + (1.0 - w) * similarity
        out.append((-fused, order, Ranked(key, fused, lex, cos)))
    out.sort(key=lambda t: (t[0], t[1]))
    return [r for _, _, r in out[:limit]]
