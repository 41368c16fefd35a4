"""``ranking_eval``'s reports: the "Search ranking quality" section of
docs/benchmarks.md (``render``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from benchmarks.harness import section_end
from benchmarks.ranking import hybrid
from benchmarks.ranking.evalset import END_MARK, NONSENSE, START_MARK, Score


@dataclass
class Choice:
    """What the evaluation chose: on all groups and leaving each group out
    (``hybrid.choose``); ``default`` says whether
    ``retrieval.fusion.DEFAULT_HYBRID`` (what the service runs) is the choice."""

    chosen: str
    left_out: dict[str, str]
    default: bool


def fmt(s: Score) -> str:
    return f"{s.mrr:.3f} / {s.recall:.3f}"


def render(
    sets: dict[str, hybrid.EvalSet],
    got: dict[str, hybrid.Halves],
    table: dict[str, dict[str, Score]],
    gaps: dict[str, dict[str, tuple[str, hybrid.Gap]]],
    groups: Sequence[hybrid.Group],
    choice: Choice,
    nonsense: dict[str, tuple[int, float]],
    rss_kib: int,
) -> str:
    chosen, left_out = choice.chosen, choice.left_out
    verdict = "the choice above"
    if not choice.default:
        verdict = "not the choice above: update `DEFAULT_HYBRID` to it"
    names = [hybrid.group_name(g) for g in groups]
    counts = {hybrid.group_name(g): len(hybrid.members(sets[g[0]], g[1], "test")) for g in groups}
    lines = [
        START_MARK,
        "_Written by `benchmarks/ranking_eval.py`; rerun to replace this section._",
        "",
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine (2 cores) shared with other "
        "work.",
        "- Sets:",
    ]
    for name, s in sets.items():
        dev, n = sum(1 for q in s.queries if q.split == "dev"), len(s.queries)
        lines.append(
            f"  - `{name}`: {len(s.docs):,} documents, {n} queries ({dev} dev / {n - dev} test)."
        )
    lines += [
        f"- Fusion chosen on the dev queries of all {len(groups) - 1} groups: **{chosen}**. "
        "Leave one group out (w chosen without that group's queries): "
        + "; ".join(f"{g}: {c}" for g, c in left_out.items())
        + ".",
        f"- The service runs `retrieval.fusion.DEFAULT_HYBRID`: **{verdict}**.",
        "",
        "MRR@10 / Recall@10, test queries:",
        "",
        "| Method | " + " | ".join(f"{n} (n={counts[n]})" for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for label, row in table.items():
        lines.append(
            f"| {label} | " + " | ".join(fmt(row[n]) if n in row else "" for n in names) + " |"
        )
    lines += [
        "",
        "Differences from the better half, test queries (± the paired standard error):",
        "",
        "| Comparison | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for label, grow in gaps.items():
        cells = [f"{grow[n][1]} vs {grow[n][0]}" if n in grow else "" for n in names]
        left = " (leave one group out)" if "leave" in label else ""
        title = f"hybrid{left} - better half, {'Recall@10' if 'recall' in label else 'MRR@10'}"
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    lines += [""]
    for name, h in got.items():
        empty, mean = nonsense[name]
        lines.append(
            f"- `{name}`: lexical index built in {h.build_s:.1f} s "
            f"({len(sets[name].docs):,} documents, tokenizing included), "
            f"{h.query_ms:.2f} ms a query (top {hybrid.CANDIDATES}); off-topic queries "
            f"({len(NONSENSE)}): {empty} come back empty from the hybrid, "
            f"{mean:.1f} results on average."
        )
    rss = f"{rss_kib / 1024:.0f} MiB"
    lines.append(f"- Peak RSS growth of the run (the sets' indexes, vectors, model): {rss}.")
    reproduce = (
        "`.venv/bin/python -m benchmarks.ranking_eval` (vectors cached under "
        "`/tmp/cairn-ranking-bench`; the first run embeds every set, a few minutes on 2 cores). "
        'Other normalisations of the halves: "Reading the fusion numbers" below (the code: '
        "commit f8c1b82, `benchmarks/ranking/forms.py`, `ranking_eval --forms`)"
    )
    return section_end(lines, reproduce, END_MARK) + "\n"  # a blank line after the end mark
