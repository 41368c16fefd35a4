"""A benchmark's results: its section of docs/benchmarks.md, the section's
first lines, a table of routes and percentiles."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
from pathlib import Path

from benchmarks.harness.wrk import WrkResult

ROOT = Path(__file__).resolve().parents[2]  # the repository
DOCS = ROOT / "docs" / "benchmarks.md"


def section_head(start_mark: str, script: str, load_before: float) -> list[str]:
    """The first lines of a benchmark's section between its marks: mark,
    provenance, date and machine. Its title and the fixed account of its
    method stand before the start mark in docs/benchmarks.md; the bench
    writes what a run changes."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        start_mark,
        f"_Written by `benchmarks/{script}`; rerun to replace this section._",
        "",
        f"- Date: {now}",
        machine_line(load_before),
    ]


def section_end(lines: list[str], reproduce: str, end_mark: str) -> str:
    """A section's text: ``lines``, then how to reproduce it and the end mark."""
    return "\n".join([*lines, "", f"Reproduce: {reproduce}.", end_mark]) + "\n"


def serve_table(rows: list[tuple[str, WrkResult]]) -> list[str]:
    """A Markdown table of routes measured through Serve."""
    lines = [
        "| Through Serve | req/s | p50 ms | p90 ms | p99 ms | errors |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, r in rows:
        ms = " | ".join(f"{r.latency_ms.get(p, 0):.2f}" for p in (50, 90, 99))
        lines.append(f"| `{label}` | {r.requests_per_s:,.0f} | {ms} | {r.errors_text()} |")
    return lines


def machine_line(load_before: float) -> str:
    """The docs' line about the machine a benchmark ran on."""
    return (
        f"- Machine: `nproc` = {len(os.sched_getaffinity(0))}, {cpu_model()}; "
        f"Linux {platform.release()}, Python {platform.python_version()}; 1-minute load "
        f"average before the run {load_before:.2f}"
    )


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def rss_mib() -> float:
    """This process's resident memory, MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank; NaN for no values)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def publish(section: str, start_mark: str, end_mark: str, no_docs: bool = False) -> None:
    """Print a benchmark's section and, unless ``no_docs``, write it into
    docs/benchmarks.md between its marks."""
    print(section, flush=True)
    if not no_docs:
        write_docs(section, start_mark=start_mark, end_mark=end_mark)
        print(f"bench: wrote {DOCS.relative_to(ROOT)}", flush=True)


def write_docs(section: str, *, start_mark: str, end_mark: str, path: Path = DOCS) -> None:
    """Put ``section`` (which starts and ends with the marks) into the docs page,
    replacing what stood between the marks."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start, end = text.find(start_mark), text.find(end_mark)
    if start != -1 and end > start:
        text = text[:start] + section + text[end + len(end_mark) :].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
