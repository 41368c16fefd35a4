"""Build the code-search evaluation set (``benchmarks/search_eval/code``).

CodeSearchNet-style, from the Python packages installed in the project's
virtual environment (read with ``ast``, nothing imported, no network):

* a document is one function or method published the way an agent would
  share a snippet: title the qualified name (``package.module.Class.name``),
  description its ``def`` line, content its source **without the docstring**;
* a query is the first sentence of that docstring (the summary line), so it
  describes what the code does in words the code need not contain.

Kept: functions with a docstring whose summary has 4 to 30 words and is not
shared by another function; a body of 3 to 60 lines after the docstring;
no private names (``_x``), no tests, no vendored copies; bodies that are
identical to another's are dropped. At most ``PER_PACKAGE`` functions per
top-level package (seeded sample), so no library dominates. Every document
is a query's target, so every other document is a distractor for it.

A third of the queries (by a hash of the qid) is ``dev``, the rest ``test``.

    .venv/bin/python -m benchmarks.search_eval.code_build [--check]
"""

from __future__ import annotations

import argparse
import ast
import collections
import gzip
import hashlib
import json
import random
import re
import sys
import sysconfig
from pathlib import Path

OUT = Path(__file__).parent / "code"
PER_PACKAGE = 60
TOTAL = 2400
SEED = 23
SKIP_PARTS = {"tests", "test", "testing", "_vendor", "vendor", "examples", "benchmarks", "_pytest"}
SKIP_PACKAGES = {"pip", "setuptools", "pkg_resources", "_distutils_hack"}


def summary(doc: str) -> str | None:
    first = doc.strip().split("\n\n")[0]
    text = " ".join(first.split())
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].rstrip(".")
    if any(c in sentence for c in "`:>{}|") or sentence.lower().startswith(("deprecated", "see ")):
        return None
    words = sentence.split()
    if not 4 <= len(words) <= 30:
        return None
    return sentence


def strip_docstring(src_lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    doc_node = node.body[0]
    assert doc_node.end_lineno is not None and node.end_lineno is not None
    start = node.lineno - 1
    if node.decorator_list:
        start = node.decorator_list[0].lineno - 1
    lines = (
        src_lines[start : doc_node.lineno - 1] + src_lines[doc_node.end_lineno : node.end_lineno]
    )
    indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    return "\n".join(x[indent:] for x in lines).strip("\n")


def def_line(src_lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    head = []
    for line in src_lines[node.lineno - 1 : node.body[0].lineno - 1]:
        head.append(line.strip())
        if line.rstrip().endswith(":"):
            break
    return " ".join(head)[:300]


def functions(path: Path, module: str):
    try:
        src = path.read_text(encoding="utf-8")
        tree = ast.parse(src)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    lines = src.splitlines()

    def walk(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                yield from walk(node.body, f"{prefix}.{node.name}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name.startswith("_"):
                    continue
                doc = ast.get_docstring(node)
                if not doc or not isinstance(node.body[0], ast.Expr):
                    continue
                s = summary(doc)
                if s is None or len(node.body) < 2:
                    continue
                code = strip_docstring(lines, node)
                n = code.count("\n") + 1
                if not 3 <= n <= 60:
                    continue
                yield {
                    "title": f"{prefix}.{node.name}",
                    "description": def_line(lines, node),
                    "content": code,
                    "query": s,
                }

    yield from walk(tree.body, module)


def collect() -> list[dict[str, str]]:
    site = Path(sysconfig.get_paths()["purelib"])
    by_pkg: dict[str, list[dict[str, str]]] = collections.defaultdict(list)
    for path in sorted(site.rglob("*.py")):
        rel = path.relative_to(site)
        parts = rel.with_suffix("").parts
        if not parts or parts[0] in SKIP_PACKAGES or parts[0].endswith(".dist-info"):
            continue
        if any(p in SKIP_PARTS or p.startswith("test_") for p in parts):
            continue
        if not all(p.isidentifier() for p in parts):
            continue
        module = ".".join(p for p in parts if p != "__init__")
        for f in functions(path, module):
            f["source"] = f"py:{f['title']}"
            by_pkg[parts[0]].append(f)
    return [f for pkg in sorted(by_pkg) for f in by_pkg[pkg] if "." in f["title"] or pkg]


def build() -> tuple[list[dict[str, str]], list[dict[str, object]]]:
    found = collect()
    summaries = collections.Counter(f["query"].lower() for f in found)
    bodies = collections.Counter(f["content"].split(":", 1)[-1] for f in found)
    unique = [
        f
        for f in found
        if summaries[f["query"].lower()] == 1 and bodies[f["content"].split(":", 1)[-1]] == 1
    ]
    return sample(unique, prefix="c", style="code", per_package=PER_PACKAGE, total=TOTAL, seed=SEED)


def sample(
    unique: list[dict[str, str]],
    *,
    prefix: str,
    style: str,
    per_package: int,
    total: int,
    seed: int,
) -> tuple[list[dict[str, str]], list[dict[str, object]]]:
    """Up to ``per_package`` functions of each package, ``total`` in all, in a
    seeded order; each becomes a document and its query (ids ``<prefix>NNNNN``
    and ``<prefix>qNNNNN``, a third of the queries ``dev`` by the id's hash,
    the rest ``test``). Shared by the code and params sets."""
    rng = random.Random(seed)
    by_pkg: dict[str, list[dict[str, str]]] = collections.defaultdict(list)
    for f in unique:
        by_pkg[f["title"].split(".")[0]].append(f)
    chosen = []
    for pkg in sorted(by_pkg):
        fs = by_pkg[pkg]
        chosen += rng.sample(fs, min(per_package, len(fs)))
    rng.shuffle(chosen)
    chosen = chosen[:total]
    docs: list[dict[str, str]] = []
    queries: list[dict[str, object]] = []
    for i, f in enumerate(chosen, 1):
        did, qid = f"{prefix}{i:05d}", f"{prefix}q{i:05d}"
        docs.append(
            {
                "id": did,
                "title": f["title"],
                "description": f["description"],
                "content": f["content"],
                "source": f["source"],
            }
        )
        split = "dev" if int(hashlib.sha256(qid.encode()).hexdigest(), 16) % 3 == 0 else "test"
        queries.append(
            {"qid": qid, "query": f["query"], "relevant": [did], "style": style, "split": split}
        )
    return docs, queries


def write(out: Path, docs: list[dict[str, str]], queries: list[dict[str, object]]) -> None:
    """The set's files: the corpus (gzip, no timestamp) and the queries."""
    out.mkdir(exist_ok=True)
    with gzip.GzipFile(out / "corpus.jsonl.gz", "wb", mtime=0) as raw:
        raw.write("".join(json.dumps(d) + "\n" for d in docs).encode())
    (out / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    print(f"wrote {out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="print statistics, write nothing")
    args = parser.parse_args(argv)
    docs, queries = build()
    pkgs = collections.Counter(d["title"].split(".")[0] for d in docs)
    splits = collections.Counter(str(q["split"]) for q in queries)
    print(f"{len(docs)} documents from {len(pkgs)} packages; queries {dict(splits)}")
    print("most documents:", ", ".join(f"{p} {n}" for p, n in pkgs.most_common(12)))
    if args.check:
        return
    write(OUT, docs, queries)


if __name__ == "__main__":
    main()
