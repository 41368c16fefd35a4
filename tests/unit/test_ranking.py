"""The hybrid ranking: retrieval.fusion.fuse (and the rrf baseline)."""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

import pytest

from benchmarks.ranking.hybrid import chosen_params
from retrieval import fusion
from retrieval.fusion import ALL_WORDS, DEFAULT_PARAMS, FusionParams, fuse, query_words, rrf

P = FusionParams(
    floor=0.3,
    match_bonus=0.1,
    specificity=0.3,
    rank_weight=0.05,
    partial_weight=0.02,
    missing_penalty=0.1,
)
NONE = FusionParams(
    floor=0.3,
    match_bonus=0.0,
    specificity=0.0,
    rank_weight=0.0,
    partial_weight=0.0,
    missing_penalty=0.0,
)


def keys(hits: list[tuple[str, float]]) -> list[str]:
    return [k for k, _ in hits]


def test_empty_inputs_give_nothing() -> None:
    assert fuse([], [], limit=10, params=P) == []
    assert rrf([], [], limit=10) == []


def test_vector_only_is_ordered_by_cosine() -> None:
    vec = [("a", 0.9), ("b", 0.7), ("c", 0.5)]
    assert keys(fuse([], vec, limit=10, params=P)) == ["a", "b", "c"]


def test_scores_are_descending_and_limit_is_applied() -> None:
    rng = random.Random(1)
    ft = [(f"d{i}", rng.random() * 1.5) for i in range(50)]
    ft.sort(key=lambda h: -h[1])
    vec = [(f"d{i}", rng.uniform(0.2, 0.9)) for i in range(25, 90)]
    vec.sort(key=lambda h: -h[1])
    out = fuse(ft, vec, limit=7, params=P)
    assert len(out) == 7
    scores = [s for _, s in out]
    assert scores == sorted(scores, reverse=True)
    assert len(set(keys(out))) == 7


def test_non_positive_limit() -> None:
    assert fuse([("a", 1.2)], [("a", 0.8)], limit=0, params=P) == []
    assert rrf([("a", 1.2)], [("a", 0.8)], limit=0) == []


def test_floor_drops_weak_vector_only_hits() -> None:
    vec = [("a", 0.45), ("b", 0.29), ("c", 0.1)]
    assert keys(fuse([], vec, limit=10, params=P)) == ["a"]
    # a nonsense query: nothing clears the floor, nothing comes back
    assert fuse([], [("x", 0.2), ("y", 0.15)], limit=10, params=P) == []


def test_floor_keeps_weak_hits_that_match_every_word() -> None:
    vec = [("a", 0.45), ("b", 0.1), ("c", 0.1)]
    out = keys(fuse([("b", ALL_WORDS + 0.01), ("c", 0.5)], vec, limit=10, params=P))
    # b matches every word: kept below the floor; c shares some words only: dropped
    assert set(out) == {"a", "b"}


def test_full_match_found_only_by_full_text_wins() -> None:
    # a rare identifier that only full-text knows: the vector list never saw it
    vec = [("v1", 0.42), ("v2", 0.35)]
    out = fuse([("id", ALL_WORDS + 0.3)], vec, limit=10, params=P)
    assert keys(out)[0] == "id"
    # its cosine is taken as the lowest returned one minus missing_penalty
    assert out[0][1] == pytest.approx(0.35 - 0.1 + 0.1 + 0.3 / 1 + 0.05 / 1)


def test_partial_match_found_only_by_full_text_is_dropped() -> None:
    assert fuse([("x", 0.9)], [("v", 0.5)], limit=10, params=P) == [("v", 0.5)]


def test_all_words_match_outranks_a_closer_vector_hit() -> None:
    ft = [("exact", ALL_WORDS + 0.05)]
    vec = [("near", 0.7), ("exact", 0.5)]
    assert keys(fuse(ft, vec, limit=2, params=P)) == ["exact", "near"]
    # without the bonuses the vector order wins
    assert keys(fuse(ft, vec, limit=2, params=NONE)) == ["near", "exact"]


def test_specificity_gates_the_full_match_bonus() -> None:
    vec = [("near", 0.7), ("m1", 0.5)]
    rare = [("m1", ALL_WORDS + 0.1)]
    common = [("m1", ALL_WORDS + 0.1)] + [(f"o{i}", ALL_WORDS + 0.1) for i in range(29)]
    rare_score = dict(fuse(rare, vec, limit=50, params=P))["m1"]
    common_score = dict(fuse(common, vec, limit=50, params=P))["m1"]
    assert rare_score - common_score == pytest.approx(0.3 - 0.3 / 30)
    # one document containing the words beats the closer vector hit; one of thirty does not
    assert keys(fuse(rare, vec, limit=1, params=P)) == ["m1"]
    assert keys(fuse(common, vec, limit=1, params=P)) == ["near"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("fix_mean", 1),
        ("--dry-run flag", 2),
        ("  EPOLL_CTL_DEL   control ", 2),
        ("a - b / c", 3),
        ("keep a process alive after I log out of the ssh session", 12),
        ("", 0),
    ],
)
def test_query_words_counts_tokens_with_a_letter_or_digit(text: str, words: int) -> None:
    assert query_words(text) == words


def test_every_word_weight_falls_from_short_to_long_queries() -> None:
    p = FusionParams(short_query=2, long_query=6, long_query_weight=0.2)
    weights = [p.every_word_weight(n) for n in range(10)]
    assert weights[:3] == [1.0, 1.0, 1.0]
    assert weights[3:6] == pytest.approx([0.8, 0.6, 0.4])
    assert weights[6:] == [0.2] * 4
    # the shipped ramp: full weight up to 3 words, none from 8 on
    d = DEFAULT_PARAMS
    assert d.every_word_weight(d.short_query) == 1.0
    assert d.every_word_weight(d.long_query) == d.long_query_weight


def test_every_word_terms_shrink_for_long_queries() -> None:
    # the handwritten-question case: a sentence whose words all occur in one
    # unrelated document, while the vector search found the answer
    ft = [("exact", ALL_WORDS + 0.05)]
    vec = [("near", 0.7), ("exact", 0.5)]
    p = dataclasses.replace(P, short_query=3, long_query=8, long_query_weight=0.0)
    assert keys(fuse(ft, vec, limit=2, words=2, params=p)) == ["exact", "near"]
    assert keys(fuse(ft, vec, limit=2, words=9, params=p)) == ["near", "exact"]
    # in between, the bonus is scaled linearly: 5 words -> 1 - 2/5
    out = dict(fuse(ft, vec, limit=2, words=5, params=p))
    assert out["exact"] == pytest.approx(0.5 + 0.6 * (0.1 + 0.3 / 1 + 0.05 / 1))
    # a long query's every-word match still passes the floor
    assert "exact" in dict(fuse(ft, [("near", 0.7), ("exact", 0.1)], limit=5, words=9, params=p))


def test_full_text_order_counts_among_full_matches() -> None:
    ft = [("first", ALL_WORDS + 0.2), ("second", ALL_WORDS + 0.1)]
    vec = [("second", 0.5), ("first", 0.5)]
    assert keys(fuse(ft, vec, limit=2, params=P)) == ["first", "second"]


def test_a_much_closer_vector_hit_beats_a_weak_partial_match() -> None:
    # the paraphrase case: the lexical hit matches one common word only
    ft = [("oneword", 0.3)]
    vec = [("meaning", 0.75), ("oneword", 0.4)]
    out = dict(fuse(ft, vec, limit=2, params=P))
    assert list(out) == ["meaning", "oneword"]
    assert out["oneword"] == pytest.approx(0.4 + 0.02 * 0.3)


def test_ties_keep_first_appearance_order() -> None:
    vec = [("x", 0.5), ("y", 0.5), ("z", 0.5)]
    assert keys(fuse([], vec, limit=3, params=P)) == ["x", "y", "z"]
    ft = [("q", 0.2), ("p", 0.2)]
    assert keys(fuse(ft, [("p", 0.5), ("q", 0.5)], limit=2, params=P)) == ["q", "p"]
    # and the same inputs always give the same output
    assert fuse(ft, vec, limit=5, params=P) == fuse(ft, vec, limit=5, params=P)


def test_duplicate_keys_count_once() -> None:
    out = fuse([("a", 0.3), ("a", 0.1)], [("a", 0.6), ("a", 0.2)], limit=5, params=P)
    assert keys(out) == ["a"]
    assert out[0][1] == pytest.approx(0.6 + 0.02 * 0.3)


def test_default_params_are_sane() -> None:
    d = DEFAULT_PARAMS
    assert 0.0 < d.floor < 1.0
    for value in (d.match_bonus, d.specificity, d.rank_weight, d.partial_weight):
        assert value >= 0.0
    # nonsense stays out with the defaults
    assert fuse([("x", 0.05)], [("y", d.floor - 0.01)], limit=10) == []


@pytest.mark.parametrize("weights", [(1.0, 1.0), (2.0, 1.0)])
def test_rrf_sums_reciprocal_ranks(weights: tuple[float, float]) -> None:
    wf, wv = weights
    out = dict(
        rrf(
            [("a", 9.0), ("b", 1.0)],
            [("b", 0.9), ("c", 0.8)],
            limit=3,
            k=60,
            fulltext_weight=wf,
            vector_weight=wv,
        )
    )
    assert out["a"] == pytest.approx(wf / 61)
    assert out["b"] == pytest.approx(wf / 62 + wv / 61)
    assert out["c"] == pytest.approx(wv / 62)


# --- hybrid (issue 36: a fixed convex combination, an identifier rule) -----------


def test_hybrid_is_a_convex_combination_of_max_normalised_bm25_and_cosine() -> None:
    params = fusion.HybridParams(lexical_weight=0.4, floor=0.25)
    lexical = [("a", 8.0), ("b", 4.0)]
    vector = [("b", 0.9), ("c", 0.5), ("a", 0.3)]
    out = fusion.hybrid(lexical, vector, limit=10, params=params, lexical_scale=8.0)
    by_key = {r.key: r for r in out}
    assert by_key["a"].score == pytest.approx(0.4 * 1.0 + 0.6 * 0.3)
    assert by_key["b"].score == pytest.approx(0.4 * 0.5 + 0.6 * 0.9)
    assert by_key["c"].score == pytest.approx(0.6 * 0.5)
    assert [r.key for r in out] == ["b", "a", "c"]
    assert (by_key["a"].lexical, by_key["a"].vector) == (8.0, 0.3)
    assert (by_key["c"].lexical, by_key["c"].vector) == (None, 0.5)


def test_bm25_is_divided_by_the_searchs_best_score_not_the_scale() -> None:
    """Max normalisation: the best BM25 hit of the search gets x = 1 whatever
    the query's scale; the scale only serves the product rules."""
    params = fusion.HybridParams(lexical_weight=0.5, floor=0.0)
    for scale in (4.0, 40.0, None):
        out = fusion.hybrid(
            [("a", 2.0), ("b", 1.0)], [("a", 0.4), ("b", 0.4)], limit=5, params=params,
            lexical_scale=scale,
        )  # fmt: skip
        assert [r.score for r in out] == pytest.approx([0.5 + 0.2, 0.25 + 0.2])


def test_hybrid_missing_cosine_and_floor() -> None:
    """A lexical-only hit stands in with the lowest cosine returned; a hit
    below the cosine floor is dropped unless it explains at least half the
    query lexically."""
    params = fusion.HybridParams(lexical_weight=0.5, floor=0.25)
    out = fusion.hybrid(
        [("x", 2.0), ("w", 0.9)],
        [("y", 0.6), ("z", 0.2), ("w", 0.1)],
        limit=10,
        params=params,
        lexical_scale=2.0,
    )
    by_key = {r.key: r for r in out}
    assert set(by_key) == {"x", "y"}  # z: weak neighbour; w: weak both ways
    assert by_key["x"].score == pytest.approx(0.5 * 1.0 + 0.5 * 0.1)
    assert by_key["x"].vector is None
    # Nothing lexical and only weak neighbours: empty (nonsense queries).
    assert fusion.hybrid([], [("y", 0.1)], limit=10, params=params) == []
    # One shared word of four with weak cosines: empty too.
    assert fusion.hybrid([("r", 1.0)], [("r", 0.1)], limit=5, lexical_scale=4.0) == []


def test_hybrid_weights_at_the_ends_are_the_halves() -> None:
    lexical = [("a", 3.0), ("b", 2.0), ("c", 1.0)]
    vector = [("c", 0.8), ("b", 0.7), ("a", 0.6)]
    only_lex = fusion.HybridParams(lexical_weight=1.0, floor=0.0)
    only_vec = fusion.HybridParams(lexical_weight=0.0, floor=0.0)
    assert [r.key for r in fusion.hybrid(lexical, vector, limit=3, params=only_lex)] == list("abc")
    assert [r.key for r in fusion.hybrid(lexical, vector, limit=3, params=only_vec)] == list("cba")
    with pytest.raises(ValueError):
        fusion.HybridParams(lexical_weight=1.5)


def test_hybrid_ties_limit_and_duplicates() -> None:
    params = fusion.HybridParams(lexical_weight=0.5, floor=0.0)
    # Equal scores keep first appearance (lexical list first); duplicates count once.
    out = fusion.hybrid([("a", 1.0), ("a", 0.5)], [("b", 0.5), ("a", 0.5)], limit=10, params=params)
    assert [r.key for r in out] == ["a", "b"]
    assert fusion.hybrid([("a", 1.0)], [], limit=0, params=params) == []
    assert (
        len(fusion.hybrid([(i, 1.0 / (i + 1)) for i in range(9)], [], limit=4, params=params)) == 4
    )


def test_the_weight_does_not_depend_on_the_bm25_scores() -> None:
    """Issue 36: a short natural-language query whose best BM25 hit "explains
    the whole query" and leads is no longer handed to the words (issue 23's
    adaptive weight did, and lost to the vector half): the cosine still leads."""
    lexical = [("words", 10.0), ("other", 3.0)]
    vector = [("meaning", 0.7), ("other", 0.45), ("words", 0.3)]
    out = fusion.hybrid(
        lexical, vector, limit=5, lexical_scale=10.0, query="keep the session alive"
    )
    assert out[0].key == "meaning"
    w = fusion.DEFAULT_HYBRID.lexical_weight
    assert {r.key: r.score for r in out}["words"] == pytest.approx(w + (1 - w) * 0.3)


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("set_iprint", True),
        ("XetFileData", True),
        ("changes sd_notify", True),
        ("--dry-run", True),
        ("numpy.linalg.norm", True),
        ("asyncio::Queue", True),
        ("sha256 digest", True),
        ("HTTPServer", True),
        ("`include_router()`", True),
        ("keep a process alive after logout", False),
        ("retry webhook deliveries postgres", False),
        ("how do I call set_iprint from a fortran wrapper script", False),  # a description
        ("a", False),
        ("", False),
    ],
)
def test_names_identifier(query: str, named: bool) -> None:
    assert fusion.names_identifier(query) is named


def test_an_identifier_that_a_document_holds_leads() -> None:
    """The exact-identifier rule: ``stop_event`` is held by one document that
    the embedding (which reads identifiers as their parts) ranks low; the
    halves swap roles and it comes first, the cosine ordering what BM25 ties
    on. The same scores for a natural-language query keep the cosine first."""
    scale = 10.0
    lexical = [("ident", 9.0), ("part1", 4.0), ("part2", 3.5)]
    vector = [("near1", 0.55), ("near2", 0.5), ("part1", 0.45), ("ident", 0.3)]
    w = fusion.DEFAULT_HYBRID.lexical_weight
    assert fusion.identifier_leads("stop_event", lexical, scale)
    out = fusion.hybrid(lexical, vector, limit=5, lexical_scale=scale, query="stop_event")
    assert out[0].key == "ident"
    assert out[0].score == pytest.approx((1 - w) * 1.0 + w * 0.3)
    prose = fusion.hybrid(lexical, vector, limit=5, lexical_scale=scale, query="stop the event")
    order = [r.key for r in prose]
    assert order.index("near1") < order.index("ident") and order[0] != "ident"
    # Two documents holding the identifier alike: the cosine decides.
    tie = fusion.hybrid(
        [("a", 10.0), ("b", 10.0)], [("b", 0.6), ("a", 0.5)], limit=5, lexical_scale=scale,
        query="stop_event",
    )  # fmt: skip
    assert [r.key for r in tie] == ["b", "a"]


def test_an_identifier_no_document_holds_does_not_lead() -> None:
    """The best BM25 hit explains under half of the query (it shares a part
    of the identifier, not the identifier): the rule does not apply."""
    lexical = [("part", 3.0)]
    vector = [("near", 0.7), ("part", 0.4)]
    assert not fusion.identifier_leads("stop_event", lexical, 10.0)
    out = fusion.hybrid(lexical, vector, limit=5, lexical_scale=10.0, query="stop_event")
    assert out[0].key == "near"
    # Postgres full text (no scale): the query's shape alone decides.
    assert fusion.identifier_leads("stop_event", lexical, None)
    assert not fusion.identifier_leads("stop_event", [], None)


def test_default_hybrid_params() -> None:
    """A small lexical share on max-normalised BM25; the words lead only by
    the identifier rule."""
    d = fusion.DEFAULT_HYBRID
    assert d.normalise == "max"
    assert 0.0 < d.lexical_weight < 0.5


def test_default_hybrid_is_the_evaluations_choice() -> None:
    """What the service runs (``DEFAULT_HYBRID``: serve_app.services.search
    calls ``hybrid`` with its defaults) is the fusion benchmarks/ranking_eval
    chose, as its section of docs/benchmarks.md records it: a new choice, or
    a changed default, without the other fails here."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text()
    found = re.search(r"Fusion chosen on the dev queries of all \d+ groups: \*\*(.+?)\*\*", text)
    assert found is not None
    assert chosen_params(found.group(1)) == fusion.DEFAULT_HYBRID
    assert "The service runs `retrieval.fusion.DEFAULT_HYBRID`: **the choice above**" in text
