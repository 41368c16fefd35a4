"""The hybrid ranking: embeddings.ranking.fuse (and the rrf baseline)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from embeddings import ranking
from embeddings.ranking import ALL_WORDS, DEFAULT_PARAMS, FusionParams, fuse, query_words, rrf

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


# --- hybrid (issue 23) ----------------------------------------------------------


def test_hybrid_is_a_convex_combination_with_components() -> None:
    params = ranking.HybridParams(
        lexical_weight=0.4, coverage_power=0.0, margin_weight=0.0, lexical_power=1.0, floor=0.25
    )
    lexical = [("a", 8.0), ("b", 4.0)]
    vector = [("b", 0.9), ("c", 0.5), ("a", 0.3)]
    out = ranking.hybrid(lexical, vector, limit=10, params=params)
    by_key = {r.key: r for r in out}
    assert by_key["a"].score == pytest.approx(0.4 * 1.0 + 0.6 * 0.3)
    assert by_key["b"].score == pytest.approx(0.4 * 0.5 + 0.6 * 0.9)
    assert by_key["c"].score == pytest.approx(0.6 * 0.5)
    assert [r.key for r in out] == ["b", "a", "c"]
    assert (by_key["a"].lexical, by_key["a"].vector) == (8.0, 0.3)
    assert (by_key["c"].lexical, by_key["c"].vector) == (None, 0.5)


def test_hybrid_missing_cosine_and_floor() -> None:
    """A lexical-only hit stands in with the lowest cosine returned; a hit
    below the cosine floor is dropped unless it explains at least half the
    query lexically."""
    params = ranking.HybridParams(
        lexical_weight=0.5, coverage_power=0.0, margin_weight=0.0, lexical_power=1.0, floor=0.25
    )
    out = ranking.hybrid(
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
    assert ranking.hybrid([], [("y", 0.1)], limit=10, params=params) == []
    # One shared word of four with weak cosines: empty too.
    assert ranking.hybrid([("r", 1.0)], [("r", 0.1)], limit=5, lexical_scale=4.0) == []


def test_hybrid_lexical_scale_cap_and_power() -> None:
    """BM25 is divided by the query's scale (not the best hit), capped at
    LEXICAL_CAP, and raised to the power: a hit explaining half the query
    keeps an eighth of the lexical weight at power 3."""
    params = ranking.HybridParams(
        lexical_weight=0.5, coverage_power=0.0, margin_weight=0.0, lexical_power=3.0, floor=0.0
    )
    out = ranking.hybrid(
        [("half", 2.0), ("many", 9.0)],
        [("half", 0.4), ("many", 0.4)],
        limit=5,
        params=params,
        lexical_scale=4.0,
    )
    by_key = {r.key: r.score for r in out}
    assert by_key["half"] == pytest.approx(0.5 * 0.5**3 + 0.5 * 0.4)
    assert by_key["many"] == pytest.approx(0.5 * ranking.LEXICAL_CAP**3 + 0.5 * 0.4)
    # Without a scale (Postgres full text) the best hit is the scale.
    out = ranking.hybrid([("a", 2.0), ("b", 1.0)], [], limit=5, params=params)
    assert [r.score for r in out] == pytest.approx([0.5, 0.5 * 0.5**3])


def test_hybrid_weights_at_the_ends_are_the_halves() -> None:
    lexical = [("a", 3.0), ("b", 2.0), ("c", 1.0)]
    vector = [("c", 0.8), ("b", 0.7), ("a", 0.6)]
    only_lex = ranking.HybridParams(lexical_weight=1.0, coverage_power=0.0, floor=0.0)
    only_vec = ranking.HybridParams(lexical_weight=0.0, margin_weight=0.0, floor=0.0)
    assert [r.key for r in ranking.hybrid(lexical, vector, limit=3, params=only_lex)] == list("abc")
    assert [r.key for r in ranking.hybrid(lexical, vector, limit=3, params=only_vec)] == list("cba")


def test_hybrid_ties_limit_and_duplicates() -> None:
    params = ranking.HybridParams(
        lexical_weight=0.5, coverage_power=0.0, margin_weight=0.0, floor=0.0
    )
    # Equal scores keep first appearance (lexical list first); duplicates count once.
    out = ranking.hybrid(
        [("a", 1.0), ("a", 0.5)], [("b", 0.5), ("a", 0.5)], limit=10, params=params
    )
    assert [r.key for r in out] == ["a", "b"]
    assert ranking.hybrid([("a", 1.0)], [], limit=0, params=params) == []
    assert (
        len(ranking.hybrid([(i, 1.0 / (i + 1)) for i in range(9)], [], limit=4, params=params)) == 4
    )


def test_hybrid_weight_grows_with_the_best_hits_coverage() -> None:
    """The lexical half's weight is lexical_weight * coverage ** coverage_power,
    coverage being how much of the query the best BM25 hit explains (BM25 /
    scale, clamped to [0, 1])."""
    params = ranking.HybridParams(
        lexical_weight=0.4, coverage_power=2.0, margin_weight=0.0, lexical_power=1.0
    )
    assert params.weight(1.0) == pytest.approx(0.4)
    assert params.weight(1.3) == pytest.approx(0.4)
    assert params.weight(0.5) == pytest.approx(0.1)
    assert params.weight(0.0) == 0.0
    assert params.weight(-1.0) == 0.0
    assert ranking.HybridParams(lexical_weight=0.4, coverage_power=0.0).weight(0.2) == 0.4
    assert ranking.HybridParams(lexical_weight=0.4, coverage_power=0.0).weight(0.2, 0.0) == 0.4
    # Same candidates; only the best hit's coverage differs (scale 4 vs 8).
    lexical = [("lex", 4.0), ("both", 2.0)]
    vector = [("vec", 0.8), ("both", 0.6), ("lex", 0.5)]
    full = ranking.hybrid(lexical, vector, limit=5, params=params, lexical_scale=4.0)
    half = ranking.hybrid(lexical, vector, limit=5, params=params, lexical_scale=8.0)
    by_key = {r.key: r.score for r in full}
    assert by_key["lex"] == pytest.approx(0.4 * 1.0 + 0.6 * 0.5)
    assert by_key["both"] == pytest.approx(0.4 * 0.5 + 0.6 * 0.6)
    assert by_key["vec"] == pytest.approx(0.6 * 0.8)
    assert [r.key for r in full] == ["lex", "both", "vec"]
    # The best hit explains half the query: weight 0.1, the cosine leads.
    by_key = {r.key: r.score for r in half}
    assert by_key["lex"] == pytest.approx(0.1 * 0.5 + 0.9 * 0.5)
    assert by_key["both"] == pytest.approx(0.1 * 0.25 + 0.9 * 0.6)
    assert [r.key for r in half] == ["vec", "both", "lex"]


def test_hybrid_without_a_scale_counts_the_best_hit_as_full_coverage() -> None:
    """Postgres full text has no scale: the best hit is the scale, so its
    coverage is 1 and the weight is lexical_weight."""
    params = ranking.HybridParams(
        lexical_weight=0.4, coverage_power=8.0, margin_weight=0.0, floor=0.0
    )
    out = ranking.hybrid([("a", 0.2)], [("a", 0.5)], limit=5, params=params)
    assert out[0].score == pytest.approx(0.4 * 1.0 + 0.6 * 0.5)
    # Nothing lexical: the weight is 0, the cosine alone.
    out = ranking.hybrid([], [("a", 0.5)], limit=5, params=params)
    assert out[0].score == pytest.approx(0.5)


def test_lead_is_the_best_hits_coverage_and_its_margin_over_the_second() -> None:
    """coverage: the best score over the scale (how much of the query the best
    hit explains); margin: 1 - x2/x1 of the two best capped shares."""
    assert ranking.lead([4.0, 2.0, 1.0], 4.0) == pytest.approx((1.0, 0.5))
    assert ranking.lead([1.0, 3.0], 4.0) == pytest.approx((0.75, 1 - 1 / 3))  # any order
    assert ranking.lead([3.0], 4.0) == pytest.approx((0.75, 1.0))  # one hit: decisive
    assert ranking.lead([], 4.0) == (0.0, 0.0)
    assert ranking.lead([2.0], 0.0) == (0.0, 0.0)
    # Both above LEXICAL_CAP: capped alike, no lead.
    assert ranking.lead([9.0, 7.0], 4.0) == pytest.approx((ranking.LEXICAL_CAP, 0.0))


def test_weight_grows_with_the_margin_and_is_capped_at_one() -> None:
    """W = min(1, coverage**k * (lexical_weight + margin_weight * margin))."""
    params = ranking.HybridParams(lexical_weight=0.1, coverage_power=2.0, margin_weight=2.0)
    assert params.weight(0.5, 0.2) == pytest.approx(0.25 * (0.1 + 0.4))
    assert params.weight(1.0, 0.0) == pytest.approx(0.1)
    assert params.weight(1.0, 0.9) == 1.0
    assert params.weight(1.0, 5.0) == 1.0
    assert params.weight(1.0, -1.0) == pytest.approx(0.1)
    assert params.weight(0.0, 1.0) == 0.0


def test_decisive_identifier_match_outranks_vector_neighbours() -> None:
    """A rare identifier (``stop_event``) that one document holds: BM25 puts it
    far ahead of documents sharing a part of it (``stop``, ``event``), the
    embedding, which reads identifiers poorly, does not return it at all and
    prefers loosely related neighbours. Its lead makes the lexical half
    count: it ranks first. Before the margin (the previous default, w 0.3,
    k 8) it came fourth, under the vector neighbours and a partial match: the
    keyword-style shortfall of issue 23."""
    scale = 10.0
    lexical = [("ident", 9.0), ("part1", 4.0), ("part2", 3.5)]
    vector = [("near1", 0.55), ("near2", 0.5), ("part1", 0.45), ("far", 0.25)]
    new = ranking.hybrid(lexical, vector, limit=5, lexical_scale=scale)
    assert new[0].key == "ident"
    assert (new[0].lexical, new[0].vector) == (9.0, None)
    previous = ranking.HybridParams(lexical_weight=0.3, coverage_power=8.0, margin_weight=0.0)
    old = ranking.hybrid(lexical, vector, limit=5, params=previous, lexical_scale=scale)
    assert [r.key for r in old] == ["near1", "part1", "near2", "ident", "part2"]
    # Two documents holding the whole query alike (no lead): the cosine decides.
    tie = ranking.hybrid(
        [("a", 10.0), ("b", 10.0)], [("b", 0.6), ("a", 0.5)], limit=5, lexical_scale=scale
    )
    assert [r.key for r in tie] == ["b", "a"]
    assert [r.score for r in tie] == pytest.approx([0.6, 0.5])


def test_default_hybrid_params() -> None:
    """The defaults are the point chosen on the dev queries (docs/benchmarks.md,
    "Search ranking quality"): the lexical half counts when its best hit
    explains the whole query and leads the second, fully from a lead of a
    sixth, and fades fast as the best hit explains less."""
    d = ranking.DEFAULT_HYBRID
    assert d.coverage_power > 0
    assert d.margin_weight > 0
    assert d.weight(1.0, 1.0) == 1.0
    assert d.weight(1.0, 0.0) == d.lexical_weight < 0.5
    assert d.weight(0.5, 1.0) < 0.05
    assert d.weight(1.0, 0.1) < d.weight(1.0, 0.2)
