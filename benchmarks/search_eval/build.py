"""Build the search-ranking evaluation set: ``corpus.jsonl.gz`` and ``queries.jsonl``.

The documents are technical write-ups taken from what is installed on the build
machine: man pages (sections 1-8, rendered with ``man -P cat``), the docstrings
of the standard library and of the packages in the project's virtual
environment (read with ``ast``, nothing is imported), and the package READMEs
in ``*.dist-info/METADATA``. Queries come in three styles:

* ``paraphrase``: the summary line of a document (a man page's NAME line, a
  docstring's first line, a package's one-line summary) is cut out of the
  document and becomes the query (as in CodeSearchNet);
* ``keyword``: a rare identifier (an option flag, a constant, a function or
  config name) that occurs in exactly one document;
* ``handwritten``: paraphrases written by hand (``HANDWRITTEN`` in
  ``handwritten.py``) that share almost no content words with the document's
  title and description.

The sources are read by ``man.py`` and ``docstrings.py``, made into documents
by ``documents.py``, the keyword queries found by ``queries.py``; the
settings and quotas are in ``config.py``, the text helpers in ``text.py``.

Generation is deterministic for a given machine, but the man pages and
packages differ between machines: the committed files are the source of
truth, this script documents how they were made.

    .venv/bin/python -m benchmarks.search_eval.build            # rewrite the files
    .venv/bin/python -m benchmarks.search_eval.build --check    # print stats only
    .venv/bin/python -m benchmarks.search_eval.build --extra-dev  # only the extra dev
                                                                  # keyword queries
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import random
import sys

from benchmarks.search_eval.config import (
    CORPUS,
    DEV_FRACTION,
    EXTRA_SEED,
    MAN_QUOTA,
    N_EXTRA_KEYWORD,
    N_KEYWORD,
    N_PARAPHRASE,
    PY_QUOTA,
    QUERIES,
    README_QUOTA,
    SEED,
)
from benchmarks.search_eval.docstrings import collect_py, collect_readmes
from benchmarks.search_eval.documents import choose, dedupe, make_doc, usable
from benchmarks.search_eval.handwritten import EXTRA_HANDWRITTEN, load_handwritten
from benchmarks.search_eval.man import collect_man
from benchmarks.search_eval.queries import ambiguous, keyword_queries
from benchmarks.search_eval.text import Raw, first_sentence, stems


def build(check: bool) -> None:
    rng = random.Random(SEED)
    print("man pages …", file=sys.stderr)
    man = collect_man()
    print(f"  {len(man)} parsed", file=sys.stderr)
    print("docstrings …", file=sys.stderr)
    py: list[Raw] = []
    for g in PY_QUOTA:
        py += collect_py(g)
    print(f"  {len(py)} parsed", file=sys.stderr)
    readmes = collect_readmes()
    print(f"  {len(readmes)} READMEs", file=sys.stderr)

    handwritten = load_handwritten()
    forced = {src for _, sources in handwritten for src in sources}

    pool = dedupe([r for r in man + py + readmes if usable(r)])
    by_group: dict[str, list[Raw]] = collections.defaultdict(list)
    for r in pool:
        by_group[r.group].append(r)
    quotas = {**MAN_QUOTA, **PY_QUOTA, "readme": README_QUOTA}
    chosen: list[Raw] = []
    for g in sorted(by_group):
        must = [r for r in by_group[g] if r.source in forced]
        rest = [r for r in by_group[g] if r.source not in forced]
        chosen += must + choose(rest, max(0, quotas.get(g, 0) - len(must)), rng)
    missing = forced - {r.source for r in chosen}
    if missing:
        raise SystemExit(f"hand-written targets not in the corpus: {sorted(missing)}")
    chosen.sort(key=lambda r: r.source)
    rng.shuffle(chosen)

    # paraphrase targets: unambiguous summaries, spread over the groups
    summary_index: dict[str, list[int]] = collections.defaultdict(list)
    for i, r in enumerate(chosen):
        for w in stems(r.summary):
            summary_index[w].append(i)
    eligible = [
        r
        for r in chosen
        if r.source not in forced
        and 4 <= len(r.summary.split()) <= 25
        and not ambiguous(r, chosen, summary_index)
        and len(stems(r.summary) & stems(first_sentence(r.body)[0])) / max(1, len(stems(r.summary)))
        < 0.75
    ]
    elig_group: dict[str, list[Raw]] = collections.defaultdict(list)
    for r in eligible:
        elig_group[_family(r.group)].append(r)
    targets: list[Raw] = []
    fams = sorted(elig_group)
    share = {"man": 0.42, "py": 0.46, "readme": 0.12}
    for fam in fams:
        k = round(N_PARAPHRASE * share[fam])
        targets += elig_group[fam][:k]
    target_ids = {r.source for r in targets}

    docs: list[dict[str, str]] = []
    for i, r in enumerate(chosen, 1):
        d = make_doc(r, target=r.source in target_ids)
        d = {"id": f"d{i:05d}", **d, "source": r.source}
        r.doc = d
        docs.append(d)
    by_source = {r.source: r.doc for r in chosen}

    queries: list[dict[str, object]] = []
    for r in targets:
        queries.append({"query": r.summary, "relevant": [r.doc["id"]], "style": "paraphrase"})
    taken = {r.doc["id"] for r in targets} | {by_source[s]["id"] for s in forced}
    queries += keyword_queries(docs, taken, rng, N_KEYWORD)
    for text, sources in handwritten:
        relevant = [by_source[src]["id"] for src in sources]
        queries.append({"query": text, "relevant": relevant, "style": "handwritten"})
    check_handwritten(handwritten, by_source)

    # splits: a third of each style goes to dev
    rng2 = random.Random(SEED + 1)
    final = []
    for style in ("paraphrase", "keyword", "handwritten"):
        qs = [q for q in queries if q["style"] == style]
        rng2.shuffle(qs)
        n_dev = round(len(qs) * DEV_FRACTION)
        for j, q in enumerate(qs):
            q["split"] = "dev" if j < n_dev else "test"
        final += qs
    final.sort(key=lambda q: (str(q["style"]), str(q["query"])))
    rng2.shuffle(final)
    out = [
        {
            "qid": f"q{i:04d}",
            "query": q["query"],
            "relevant": q["relevant"],
            "style": q["style"],
            "split": q["split"],
        }
        for i, q in enumerate(final, 1)
    ]
    out += extra_dev(docs, out)
    stats(docs, out)
    if check:
        return
    with gzip.GzipFile(CORPUS, "wb", mtime=0, compresslevel=9) as f:
        for d in docs:
            f.write((json.dumps(d, ensure_ascii=False) + "\n").encode())
    with QUERIES.open("w") as f:
        for q in out:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    print(f"wrote {CORPUS} ({CORPUS.stat().st_size / 1e6:.2f} MB) and {QUERIES}", file=sys.stderr)


def extra_dev(
    docs: list[dict[str, str]], queries: list[dict[str, object]]
) -> list[dict[str, object]]:
    """The extra dev-only queries: ``extra_dev_keyword``'s, then EXTRA_HANDWRITTEN's
    (ids go on from the keyword ones). Their targets must be targeted by no
    query in ``queries``."""
    out = extra_dev_keyword(docs, queries)
    by_source = {d["source"]: d for d in docs}
    taken = {str(r) for q in queries for r in q["relevant"]}  # type: ignore[attr-defined]
    for text, sources in EXTRA_HANDWRITTEN:
        relevant = [by_source[src]["id"] for src in sources]
        if taken & set(relevant):
            raise SystemExit(f"extra hand-written query {text!r}: target already queried")
        out.append(
            {
                "qid": f"x{len(out) + 1:04d}",
                "query": text,
                "relevant": relevant,
                "style": "handwritten",
                "split": "dev",
            }
        )
    check_handwritten(EXTRA_HANDWRITTEN, by_source)
    return out


def extra_dev_keyword(
    docs: list[dict[str, str]], queries: list[dict[str, object]], n: int = N_EXTRA_KEYWORD
) -> list[dict[str, object]]:
    """``n`` more keyword queries, all ``dev``, made by ``keyword_queries``
    with EXTRA_SEED, for documents that no query in ``queries`` targets (so
    they share no target with the test split), one query per document (a
    Python name can give both a name and a body candidate: only the first
    drawn is kept, so the queries are independent). Query ids ``x0001``…

    Why: the 40 dev keyword queries are saturated (lexical MRR@10 0.99), so
    tuning on dev could not see the fusion's keyword shortfall on test."""
    taken = {str(r) for q in queries for r in q["relevant"]}  # type: ignore[attr-defined]
    drawn = keyword_queries(docs, taken, random.Random(EXTRA_SEED), len(docs))
    out: list[dict[str, object]] = []
    seen: set[str] = set()
    for q in drawn:
        target = q["relevant"][0]  # type: ignore[index]
        if target in seen:
            continue
        seen.add(target)
        out.append(
            {
                "qid": f"x{len(out) + 1:04d}",
                "query": q["query"],
                "relevant": q["relevant"],
                "style": "keyword",
                "split": "dev",
            }
        )
        if len(out) == n:
            break
    return out


def append_extra_dev() -> None:
    """Append ``extra_dev``'s queries to the committed queries file
    (replacing any earlier extra queries; the other lines stay as they are)."""
    with gzip.open(CORPUS, "rt") as f:
        docs = [json.loads(line) for line in f]
    lines = QUERIES.read_text().splitlines(keepends=True)
    base = [line for line in lines if not json.loads(line)["qid"].startswith("x")]
    extra = extra_dev(docs, [json.loads(line) for line in base])
    with QUERIES.open("w") as f:
        f.writelines(base)
        for q in extra:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    stats(docs, [json.loads(line) for line in base] + extra)
    print(f"appended {len(extra)} dev queries to {QUERIES}", file=sys.stderr)


def _family(group: str) -> str:
    if group.startswith("man") or group == "gcloud":
        return "man"
    return "readme" if group == "readme" else "py"


def check_handwritten(
    hw: list[tuple[str, list[str]]], by_source: dict[str, dict[str, str]]
) -> None:
    for q, sources in hw:
        for source in sources:
            d = by_source[source]
            shared = stems(q) & stems(d["title"] + " " + d["description"])
            if len(shared) > 1:
                print(
                    f"  hand-written {q!r} shares {sorted(shared)} with {source}", file=sys.stderr
                )


def stats(docs: list[dict[str, str]], queries: list[dict[str, object]]) -> None:
    fam = collections.Counter(d["source"].split(":")[0] for d in docs)
    grp = collections.Counter(
        d["source"].split("(")[-1].rstrip(")") if d["source"].startswith("man:") else "-"
        for d in docs
    )
    print(f"documents: {len(docs)} {dict(fam)} man sections {dict(grp)}", file=sys.stderr)
    sty = collections.Counter((q["style"], q["split"]) for q in queries)
    print(f"queries: {len(queries)} {dict(sorted(sty.items()))}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search_eval.build")
    parser.add_argument("--check", action="store_true", help="print statistics, write nothing")
    parser.add_argument(
        "--extra-dev",
        action="store_true",
        help="append the extra dev queries to the committed queries file (nothing else)",
    )
    args = parser.parse_args(argv)
    if args.extra_dev:
        append_extra_dev()
        return
    build(args.check)


if __name__ == "__main__":
    main()
