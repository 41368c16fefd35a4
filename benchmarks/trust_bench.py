"""The trust prior in search (docs/benchmarks.md, "Trust prior in search"),
offline: with no verifications it changes no order of the evaluation sets; on
near-duplicates with random records, how often the working copy comes first.

    .venv/bin/python -m benchmarks.trust_bench [--no-docs] [--semantic]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.harness import publish, section_head
from benchmarks.ranking.evalset import Query, evaluate
from benchmarks.ranking.hybrid import EvalSet, fields, halves, key, lexical_index, load
from retrieval.fusion import hybrid
from retrieval.lexical import LexicalIndex
from serve_app.kit import trust
from serve_app.services.search import Hit, trust_prior

START_MARK = "<!-- trust-bench:start -->"
END_MARK = "<!-- trust-bench:end -->"
CANDIDATES = 100
GROUPS = 120
SEED = 33
NOW = datetime(2026, 1, 1, tzinfo=UTC)
RECORDS = ("works", "mixed", "fails", "untried")
COPY_BASE = 100_000_000
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def ranked(hits: Sequence[tuple[int, float]], scores: dict[int, float] | None) -> list[int]:
    """The hits in the order search answers: the prior after the ranking
    (``scores``: trust by key; None: no prior step at all, the order
    ``services.search.ranked`` leaves: by score, ties by search id)."""
    if scores is None:
        return [k for k, _ in sorted(hits, key=lambda pair: (-pair[1], pair[0]))]
    # Each hit with its item's trust score, as search reads them.
    found = [(Hit("pattern", k, s), uuid.UUID(int=k), scores.get(k, 0.0)) for k, s in hits]
    return [h.search_id for h, _ in trust_prior(found)]


def eval_set(name: str, semantic: bool, model_box: list[Any]) -> tuple[str, bool]:
    """The set's row of the section's first table, and whether the prior with
    no verifications kept every order. ``semantic``: the hybrid of BM25 and
    vectors (the set embedded once, cached), else BM25 alone."""
    s = load(name)
    if semantic:
        h = halves(s, model_box)
        hits = [
            [(int(r.key), r.score) for r in hybrid(lex, vec, limit=CANDIDATES, lexical_scale=sc)]  # type: ignore[call-overload]
            for lex, vec, sc in zip(h.lexical, h.vector, h.scales, strict=True)
        ]
    else:
        index, _ = lexical_index(s)
        hits = [index.search(q.text, CANDIDATES) for q in s.queries]
    rnd = random.Random(SEED)
    noise = {key(d["id"]): rnd.random() for d in s.docs}
    plain, zero, noisy = ([ranked(h, prior) for h in hits] for prior in (None, {}, noise))
    same = plain == zero
    mode = "semantic" if semantic else "full text"
    found = [evaluate(order, s.queries) for order in (plain, zero, noisy)]
    scores = [f"{x.mrr:.3f} / {x.recall:.3f}" for x in found]
    row = f"| {name} | {mode} | {len(s.queries)} | {scores[0]} | {scores[1]} | "
    return row + f"{'yes' if same else 'NO'} | {scores[2]} |", same


def report(rnd: random.Random, outcome: str, group: str) -> trust.Report:
    age = timedelta(days=rnd.uniform(0, 200))
    weight = rnd.choice((1.0, 1.0, 0.5, 0.25))
    return trust.Report(group, outcome, 1, NOW - age, weight)


def record(rnd: random.Random, kind: str) -> float:
    """The trust score of a copy with this kind of record."""
    reports: list[trust.Report] = []
    if kind == "works":
        reports = [report(rnd, trust.WORKED, f"v{i}") for i in range(rnd.choice((2, 3)))]
    elif kind == "mixed":
        reports = [report(rnd, trust.WORKED, "v0"), report(rnd, trust.FAILED, "v1")]
    elif kind == "fails":
        reports = [report(rnd, trust.FAILED, f"v{i}") for i in range(2)]
    return trust.score(reports, 1, NOW)


# A light edit adds one of these (words no query of the sets is about).
NOTES = ("Tested once more before posting.", "Shared here as it stood after a review.",
         "Copied from an older note, lightly edited.", "Kept short on purpose.")  # fmt: skip


def variant(rnd: random.Random, doc: dict[str, Any], heavy: bool) -> dict[str, str | None]:
    """A near-duplicate: the same title and description, the content's
    sentences reordered and a short note added (``heavy``: and one of the
    sentences dropped instead, which may take query words with it)."""
    out = fields(doc)
    sentences = _SENTENCE.split(doc["content"] or "")
    if heavy and len(sentences) > 2:
        sentences.pop(rnd.randrange(len(sentences)))
    elif not heavy:
        sentences.append(rnd.choice(NOTES))
    rnd.shuffle(sentences)
    out["content"] = " ".join(sentences)
    return out


def near_duplicates(heavy: bool) -> tuple[list[str], dict[str, Any]]:
    """The rows of the section's second table for light or ``heavy`` edits,
    and the groups' facts."""
    s: EvalSet = load("docs")
    rnd = random.Random(SEED)
    by_doc: dict[int, list[Query]] = {}
    for q in s.queries:
        if len(q.relevant) == 1:
            by_doc.setdefault(next(iter(q.relevant)), []).append(q)
    chosen = sorted(by_doc)[:GROUPS]
    copies: dict[int, dict[str, int]] = {}  # doc -> record kind -> copy key
    scores: dict[int, float] = {}
    seen: dict[str, list[float]] = {k: [] for k in RECORDS}
    index = LexicalIndex()
    docs = {key(d["id"]): d for d in s.docs}
    index.add((k, fields(d)) for k, d in docs.items() if k not in copies and k not in chosen)
    for doc_key in chosen:
        kinds = list(RECORDS)
        rnd.shuffle(kinds)
        copies[doc_key] = {}
        for slot, kind in enumerate(kinds):
            copy_key = COPY_BASE + doc_key * 10 + slot
            index.add([(copy_key, variant(rnd, docs[doc_key], heavy))])
            copies[doc_key][kind] = copy_key
            scores[copy_key] = record(rnd, kind)
            seen[kind].append(scores[copy_key])
    index.commit()
    queries = [q for d in chosen for q in by_doc[d]]
    first = {"plain": 0, "prior": 0}
    lists: dict[str, list[list[int]]] = {"plain": [], "prior": []}
    for q in queries:
        doc_key = next(iter(q.relevant))
        hits = index.search(q.text, CANDIDATES)
        group = set(copies[doc_key].values())
        for mode, order in (("plain", ranked(hits, None)), ("prior", ranked(hits, scores))):
            lists[mode].append(order)
            among = [k for k in order if k in group]
            if among and among[0] == copies[doc_key]["works"]:
                first[mode] += 1
    owners = [(q, copies[next(iter(q.relevant))]) for q in queries]
    works_q = [replace(q, relevant=frozenset({own["works"]})) for q, own in owners]
    group_q = [replace(q, relevant=frozenset(own.values())) for q, own in owners]
    n, name = max(1, len(queries)), "heavy" if heavy else "light"
    rows = [f"| {name} | the working copy first among its group | {first['plain'] / n:.1%} | "
            f"{first['prior'] / n:.1%} |"]  # fmt: skip
    for label, relevant in (("the working copy", works_q), ("any copy", group_q)):
        mrr = [f"{evaluate(lists[m], relevant).mrr:.3f}" for m in ("plain", "prior")]
        kept = " (relevance kept)" if relevant is group_q else ""
        rows.append(f"| {name} | MRR@10, {label} relevant{kept} | {' | '.join(mrr)} |")
    mean = ", ".join(f"{k} {sum(v) / len(v):.2f}" for k, v in seen.items() if v)
    return rows, {"groups": len(chosen), "queries": len(queries), "mean": mean}


def render(
    sets: list[str],
    dups: list[tuple[list[str], dict[str, Any]]],
    load_before: float,
    seconds: float,
) -> str:
    lines = section_head(START_MARK, "trust_bench.py", load_before)
    facts = dups[0][1]
    lines += [
        f"- Ran in {seconds:.0f} s; the prior's weight w = {trust.PRIOR_WEIGHT}.",
        "",
        "**The project's evaluation sets** (no verifications: every trust 0), MRR@10 / Recall@10:",
        "",
        "| Set | Mode | Queries | Without the prior | With it, no verifications | Same order | "
        "With random trust on every document |",
        "|---|---|---:|---:|---:|---|---:|",
        *sets,
        "",
        f"**Near-duplicates** ({facts['groups']} documents of `docs`; {facts['queries']} "
        f"queries; mean trust score by record: {facts['mean']}):",
        "",
        "| Edits | | Without the prior | With the prior |",
        "|---|---|---:|---:|",
        *(row for rows, _ in dups for row in rows),
        END_MARK,
    ]
    return "\n".join(lines) + "\n\n"  # a blank line after the end mark


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-docs", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument(
        "--semantic",
        action="store_true",
        help="the evaluation sets in semantic mode too (embeds them once: minutes on a CPU)",
    )
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    model_box: list[Any] = []
    modes = (False, True) if args.semantic else (False,)
    sets = [eval_set(name, m, model_box) for m in modes for name in ("docs", "code")]
    dups = [near_duplicates(heavy=False), near_duplicates(heavy=True)]
    section = render([row for row, _ in sets], dups, load_before, time.perf_counter() - t0)
    if not all(same for _, same in sets):
        print(section)
        raise SystemExit("the prior changed the order without any verification")
    publish(section, START_MARK, END_MARK, args.no_docs)


if __name__ == "__main__":
    main()
