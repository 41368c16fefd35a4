"""``ranking_eval --forms``: other normalisations of the two halves, each
with one fixed weight chosen the way the product's is (``hybrid.choose``),
scored on the test queries. A form ranks by ``w·x + (1-w)·c`` over each
half's normalised scores, with the identifier and floor rules of
``retrieval.fusion.hybrid``; nothing here is served."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.ranking import hybrid
from retrieval.fusion import DEFAULT_HYBRID, identifier_leads, merge_candidates

# A normalisation: (scores best first, the query's lexical scale) -> (each
# key's value, the value of a key the half did not return).
Norm = Callable[[dict[int, float], float], tuple[dict[int, float], float]]


def by_max(scores: dict[int, float], _: float) -> tuple[dict[int, float], float]:
    """Divided by the best score (the product's lexical half); missing: 0."""
    top = max(scores.values(), default=0.0)
    return {k: v / top if top > 0 else 0.0 for k, v in scores.items()}, 0.0


def by_max_lowest(scores: dict[int, float], scale: float) -> tuple[dict[int, float], float]:
    """Divided by the best score; missing: the lowest returned (as the
    product treats a missing cosine)."""
    out, _ = by_max(scores, scale)
    return out, min(out.values(), default=0.0)


def by_scale(scores: dict[int, float], scale: float) -> tuple[dict[int, float], float]:
    """min(1, BM25 / the query's summed IDF): the share of the query a
    document explains, the same unit for every query; missing: 0."""
    top = max(scores.values(), default=0.0)
    norm = scale if scale > 0 else top
    return {k: min(v / norm, 1.0) if norm > 0 else 0.0 for k, v in scores.items()}, 0.0


def min_max(scores: dict[int, float], _: float) -> tuple[dict[int, float], float]:
    """(s - lowest) / (best - lowest) over the half's candidates; missing: 0."""
    lo, hi = min(scores.values(), default=0.0), max(scores.values(), default=0.0)
    return {k: (v - lo) / (hi - lo) if hi > lo else 1.0 for k, v in scores.items()}, 0.0


def z_score(scores: dict[int, float], _: float) -> tuple[dict[int, float], float]:
    """(s - mean) / standard deviation over the half's candidates; missing:
    the lowest."""
    if len(scores) < 2:
        return {k: 0.0 for k in scores}, 0.0
    mean = sum(scores.values()) / len(scores)
    sd = math.sqrt(sum((v - mean) ** 2 for v in scores.values()) / len(scores)) or 1.0
    out = {k: (v - mean) / sd for k, v in scores.items()}
    return out, min(out.values())


def reciprocal_rank(scores: dict[int, float], _: float) -> tuple[dict[int, float], float]:
    """1 / (1 + rank) in the half's order (weighted RRF with k = 1); missing: 0."""
    return {k: 1.0 / (1 + r) for r, k in enumerate(scores)}, 0.0


def raw(scores: dict[int, float], _: float) -> tuple[dict[int, float], float]:
    """The cosine as it is (the product's vector half); missing: the lowest."""
    return dict(scores), min(scores.values(), default=0.0)


@dataclass(frozen=True)
class Form:
    label: str
    lexical: Norm
    vector: Norm
    gate: bool = False  # x times the raw cosine: the cosine gates the words


FORMS = [
    Form("BM25 / best BM25, cosine (the product)", by_max, raw),
    Form("BM25 / the query's summed IDF, cosine", by_scale, raw),
    Form("BM25 / best, missing at the lowest returned, cosine", by_max_lowest, raw),
    Form("min-max both halves", min_max, min_max),
    Form("z-scores both halves", z_score, z_score),
    Form("reciprocal ranks both halves", reciprocal_rank, reciprocal_rank),
    Form("BM25 / best, min-max cosine", by_max, min_max),
    Form("BM25 / best times cosine (gated), cosine", by_max, raw, gate=True),
]


def fusion(form: Form, w: float) -> hybrid.Fusion:
    floor, explains = DEFAULT_HYBRID.floor, DEFAULT_HYBRID.explains

    def fused(
        lex: list[tuple[int, float]], vec: list[tuple[int, float]], scale: float, text: str
    ) -> list[int]:
        cosines, scores, keys = merge_candidates(lex, vec)
        top = max(scores.values(), default=0.0)
        norm = scale if scale > 0 else top
        xs, x_missing = form.lexical(scores, scale)
        cs, c_missing = form.vector(cosines, scale)
        lowest = min(cosines.values(), default=0.0)
        weight = 1.0 - w if identifier_leads(text, lex, scale) else w
        out = []
        for order, k in enumerate(keys):
            cos = cosines.get(k, lowest)
            share = scores[k] / norm if k in scores and norm > 0 else 0.0
            if cos < floor and share < explains:
                continue
            x = xs.get(k, x_missing) * (max(cos, 0.0) if form.gate else 1.0)
            out.append((-(weight * x + (1.0 - weight) * cs.get(k, c_missing)), order, k))
        out.sort()
        return [k for _, _, k in out[: hybrid.TOP]]

    return fused


def report(
    sets: dict[str, hybrid.EvalSet],
    got: dict[str, hybrid.Halves],
    base: dict[str, dict[str, list[list[int]]]],
    groups: Sequence[hybrid.Group],
) -> str:
    """One row per form and choice rule: the weight chosen on all groups and
    leaving each out, and on the test queries the groups whose MRR@10 or
    Recall@10 falls below the better half by more than NOISE_SE paired
    standard errors (all groups' choice / leave one group out), the worst
    difference in standard errors, and the mean MRR@10 difference."""
    lines = [
        "| Form | choice rule | w (all groups) | w leaving out "
        + ", ".join(hybrid.group_name(g) for g in groups)
        + " | test: below the better half beyond noise (all / left out) "
        "| worst test difference, SEs | mean test MRR@10 - better half (all) |",
        "|---|---|---|---|---|---|---|",
    ]
    for form in FORMS:
        fused: dict[str, dict[str, list[list[int]]]] = {}
        for name, h in got.items():
            texts = [q.text for q in sets[name].queries]
            fused[name] = {
                f"w={w:g}": [
                    fusion(form, w)(lx, vx, sc, t)
                    for lx, vx, sc, t in zip(h.lexical, h.vector, h.scales, texts, strict=True)
                ]
                for w in hybrid.WEIGHTS
            }
        for rule, parsimony in (("parsimony", True), ("best mean (before)", False)):
            pool = [f"convex {n}" for n in fused[next(iter(fused))]]
            renamed = {s: {f"convex {n}": r for n, r in d.items()} for s, d in fused.items()}
            chosen = hybrid.choose(renamed, base, sets, groups, pool, parsimony=parsimony)
            left = {
                g: hybrid.choose(
                    renamed, base, sets, [o for o in groups if o != g], pool, parsimony
                )
                for g in groups
            }
            below: tuple[list[str], list[str]] = ([], [])
            worst, mrr = math.inf, []
            for g in groups:
                s, idx = sets[g[0]], hybrid.members(sets[g[0]], g[1], "test")
                for which, pick in enumerate((chosen, left[g])):
                    for recall in (False, True):
                        half = better_half(base[g[0]], s, idx, recall)
                        d = hybrid.gap(renamed[g[0]][pick], half, s, idx, recall)
                        worst = min(worst, d.diff / d.se if d.se else 0.0)
                        if not d.within_noise and hybrid.group_name(g) not in below[which]:
                            below[which].append(hybrid.group_name(g))
                        if which == 0 and not recall:
                            mrr.append(d.diff)
            lines.append(
                f"| {form.label} | {rule} | {chosen.split()[-1][2:]} | "
                + ", ".join(left[g].split()[-1][2:] for g in groups)
                + f" | {', '.join(below[0]) or 'none'} / {', '.join(below[1]) or 'none'} "
                f"| {worst:+.2f} | {float(np.mean(mrr)):+.3f} |"
            )
    lines.append(
        f"\nBeyond noise: more than {hybrid.NOISE_SE:g} paired standard errors below; the better "
        "half is the one with the higher test figure on that group and measure."
    )
    return "\n".join(lines)


def better_half(
    halves: dict[str, list[list[int]]], s: hybrid.EvalSet, idx: Sequence[int], recall: bool
) -> list[list[int]]:
    lx, vx = (hybrid.score(halves[h], s, idx) for h in ("lexical", "vector"))
    if recall:
        return halves["lexical" if lx.recall >= vx.recall else "vector"]
    return halves["lexical" if lx.mrr >= vx.mrr else "vector"]
