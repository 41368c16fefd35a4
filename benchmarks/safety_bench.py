"""The content screen (serve_app/kit/screening, issue 49): catch rate per
kind over the labelled set, false positives over real benign text, and the
time to screen a 64 KB pattern. Prints the lines of docs/benchmarks.md,
"Content screening".

    .venv/bin/python -m benchmarks.safety_bench [--docstrings 6000] [--runs 200]

The labelled set is benchmarks/safety/cases.jsonl (written for Cairn: secrets
of each provider format as seeded templates, hidden-text tricks, instructions
aimed at agents with each obfuscation, risky code of each label kind, and hard
benign cases). The benign text is the search-evaluation sets
(benchmarks/search_eval: man pages, docstrings, code, parameters) and a seeded
sample of the installed packages' docstrings.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections import Counter

from benchmarks.safety.cases import eval_documents, load_cases, package_docstrings
from serve_app.kit.screening import RULESET_VERSION, Field, Verdict, screen


def caught(expect: str, kind: str, verdict: Verdict) -> bool:
    if expect == "secret":
        return bool(verdict.secrets)
    if expect == "hidden":
        return bool(verdict.hidden)
    if expect == "hold":
        return bool(verdict.holds) and not verdict.refused
    if expect == "label":
        return any(f.kind == kind for f in verdict.labels)
    return not (verdict.refused or verdict.holds or verdict.labels)


def catch_rates() -> None:
    total: Counter[str] = Counter()
    hit: Counter[str] = Counter()
    for case in load_cases():
        key = case.kind if case.expect == "label" else case.expect
        total[key] += 1
        hit[key] += caught(case.expect, case.kind, screen([Field("f", case.text, case.field_kind)]))  # type: ignore[arg-type]
    print(f"ruleset {RULESET_VERSION}; labelled set: {sum(total.values())} cases")
    for key in sorted(total):
        name = "benign (must pass)" if key == "pass" else key
        print(f"  {name:28s} {hit[key]:3d}/{total[key]:3d}  {100 * hit[key] / total[key]:5.1f}%")


def false_positives(docstrings: int) -> None:
    for label, source in (
        ("search-eval documents and code", eval_documents()),
        ("installed packages' docstrings", package_docstrings(docstrings)),
    ):
        n = flagged = labelled = 0
        rules: Counter[str] = Counter()
        for _, fields in source:
            n += 1
            verdict = screen([Field(name, text, kind) for name, text, kind in fields])  # type: ignore[arg-type]
            if verdict.refused or verdict.holds:
                flagged += 1
                rules.update(f.rule for f in (*verdict.secrets, *verdict.hidden, *verdict.holds))
            if verdict.labels:
                labelled += 1
                rules.update(f"label:{f.rule}" for f in verdict.labels)
        print(
            f"  {label}: {n} items, held or refused {flagged} ({100 * flagged / n:.2f}%), "
            f"labelled {labelled} ({100 * labelled / n:.2f}%)"
            + (f"; rules {dict(rules.most_common(6))}" if rules else "")
        )


def timing(runs: int) -> None:
    """p50/p99 of screening a 64 KB pattern: 44 KB of markdown (man pages and
    docstrings) and 20 KB of code examples, a different slice each run."""
    rng = random.Random(49)
    docs = [(doc_id, dict((n, t) for n, t, _ in fields)) for doc_id, fields in eval_documents()]
    prose = "\n\n".join(d["content"] for doc_id, d in docs if doc_id.startswith("d"))
    code = "\n\n".join(d["content"] for doc_id, d in docs if doc_id.startswith("c"))
    times: list[float] = []
    cpu: list[float] = []
    for _ in range(runs):
        a, b = rng.randrange(len(prose) - 50_000), rng.randrange(len(code) - 25_000)
        fields = [
            Field("title", "A 64 KB pattern", "plain"),
            Field("description", prose[a : a + 1_000], "markdown"),
            Field("content", prose[a + 1_000 : a + 44 * 1024], "markdown"),
            Field("code_examples.main.code", code[b : b + 20 * 1024 - 1_000], "code"),
        ]
        start, start_cpu = time.perf_counter(), time.process_time()
        screen(fields)
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    for name, xs in (("wall", times), ("CPU", cpu)):
        xs.sort()
        p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
        print(
            f"  64 KB pattern, {runs} runs, {name} time: p50 {statistics.median(xs):.1f} ms, "
            f"p99 {p99:.1f} ms, max {xs[-1]:.1f} ms"
        )
    with open("/proc/loadavg") as f:
        print(f"  (load average during the run: {f.read().split()[0]} on {os.cpu_count()} CPUs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docstrings", type=int, default=6000)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    print("Catch rate per kind (target >= 95%):")
    catch_rates()
    print("Benign text (targets: <= 0.5% held or refused, <= 2% labelled):")
    false_positives(args.docstrings)
    print("Time (target: p99 <= 20 ms):")
    timing(args.runs)


if __name__ == "__main__":
    main()
