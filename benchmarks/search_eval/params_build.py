"""Build the parameter-question evaluation set (``benchmarks/search_eval/params``).

Natural-language questions over code, a kind the other sets do not cover: the
question describes *one detail* of what a function takes, in the words of its
documentation, and the answer is the function. Built from the Python packages
installed in the project's virtual environment (read with ``ast``, nothing
imported, no network):

* a document is one public function or method published the way an agent
  would share a snippet: title the qualified name, description the first
  sentence of its docstring (what it does), content its ``def`` line and its
  source **without the docstring**;
* a query is the description of one of its parameters (the first sentence of
  a numpy-style ``Parameters`` entry or a Google-style ``Args:`` entry), as
  someone would ask for the function that takes it ("the maximum number of
  redirects to follow before giving up"); the description is in no
  document, the parameter's name is (in the ``def`` line and the body).

Kept: parameter descriptions of 6 to 30 words, not starting with a type or a
reference, with no two queries sharing their first five words (so a common
description such as "Axis along which ..." cannot have several right answers);
one query per function (its longest such parameter description); functions of
3 to 60 lines; no private names, tests or vendored copies. At most
``PER_PACKAGE`` functions per top-level package (seeded sample).

A third of the queries (by a hash of the qid) is ``dev``, the rest ``test``.

    .venv/bin/python -m benchmarks.search_eval.params_build [--check]
"""

from __future__ import annotations

import argparse
import ast
import collections
import re
import sysconfig
from pathlib import Path

from benchmarks.search_eval.code_build import (
    SKIP_PACKAGES,
    SKIP_PARTS,
    sample,
    strip_docstring,
    write,
)

OUT = Path(__file__).parent / "params"
PER_PACKAGE = 60
TOTAL = 1500
SEED = 36

_NUMPY_HEAD = re.compile(r"^\s*(Parameters|Arguments|Args|Keyword Arguments)\s*:?\s*$")
_RULE = re.compile(r"^\s*-{3,}\s*$")
_NUMPY_ENTRY = re.compile(r"^(\s*)(\*{0,2}[A-Za-z_]\w*)\s*(:.*)?$")
_GOOGLE_ENTRY = re.compile(r"^(\s*)(\*{0,2}[A-Za-z_]\w*)\s*(\([^)]*\))?\s*:\s*(.*)$")
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]+\s*:?\s*$")


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    return re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].rstrip(".")


def summary(doc: str) -> str:
    return first_sentence(doc.strip().split("\n\n")[0])


def parameters(doc: str) -> dict[str, str]:
    """Parameter name -> its description, from a numpy- or Google-style
    docstring (empty when it has neither)."""
    lines = doc.expandtabs().splitlines()
    out: dict[str, str] = {}
    i = 0
    while i < len(lines):
        if not _NUMPY_HEAD.match(lines[i]):
            i += 1
            continue
        numpy = i + 1 < len(lines) and bool(_RULE.match(lines[i + 1]))
        i += 2 if numpy else 1
        name: str | None = None
        indent = -1
        body: list[str] = []
        while i < len(lines):
            line = lines[i]
            if not line.strip():
                i += 1
                if body and i < len(lines) and not lines[i].startswith(" " * (indent + 1)):
                    pass
                continue
            if numpy and i + 1 < len(lines) and _RULE.match(lines[i + 1]):
                break  # the next numpy section
            if not numpy and _SECTION.match(line) and not line.startswith(" "):
                break
            lead = len(line) - len(line.lstrip())
            entry = (_NUMPY_ENTRY if numpy else _GOOGLE_ENTRY).match(line)
            if entry and (indent < 0 or lead <= indent):
                if name and body:
                    out[name] = " ".join(body)
                name, indent, body = entry.group(2).lstrip("*"), lead, []
                if not numpy and entry.group(4):
                    body.append(entry.group(4))
            elif name is not None and lead > indent:
                body.append(line.strip())
            elif indent >= 0 and lead < indent:
                break
            i += 1
        if name and body:
            out[name] = " ".join(body)
    return out


def good_question(text: str) -> str | None:
    sentence = first_sentence(text)
    if any(c in sentence for c in "`:>{}|=[]") or "http" in sentence:
        return None
    lowered = sentence.lower()
    if lowered.startswith(("see ", "deprecated", "same as", "if true", "if false", "ignored")):
        return None
    if re.match(r"^(int|str|bool|float|list|dict|tuple|optional|array|callable)\b", lowered):
        return None
    if not 6 <= len(sentence.split()) <= 30:
        return None
    return sentence


def functions(path: Path, module: str):  # type: ignore[no-untyped-def]
    try:
        src = path.read_text(encoding="utf-8")
        tree = ast.parse(src)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    lines = src.splitlines()

    def walk(body, prefix):  # type: ignore[no-untyped-def]
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                yield from walk(node.body, f"{prefix}.{node.name}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name.startswith("_"):
                    continue
                doc = ast.get_docstring(node)
                if not doc or not isinstance(node.body[0], ast.Expr) or len(node.body) < 2:
                    continue
                args = {a.arg for a in node.args.args + node.args.kwonlyargs}
                asked = [
                    (q, name)
                    for name, text in parameters(doc).items()
                    if name in args and (q := good_question(text))
                ]
                what = summary(doc)
                if not asked or not 3 <= len(what.split()) <= 40:
                    continue
                code = strip_docstring(lines, node)
                if not 3 <= code.count("\n") + 1 <= 60:
                    continue
                question, param = max(asked, key=lambda a: (len(a[0]), a[1]))
                yield {
                    "title": f"{prefix}.{node.name}",
                    "description": what,
                    "content": code,
                    "query": question,
                    "param": param,
                }

    yield from walk(tree.body, module)


def collect() -> list[dict[str, str]]:
    site = Path(sysconfig.get_paths()["purelib"])
    found: list[dict[str, str]] = []
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
            f["source"] = f"py:{f['title']}#{f['param']}"
            found.append(f)
    return found


def build() -> tuple[list[dict[str, str]], list[dict[str, object]]]:
    found = collect()
    heads = collections.Counter(" ".join(f["query"].lower().split()[:5]) for f in found)
    bodies = collections.Counter(f["content"].split(":", 1)[-1] for f in found)
    unique = [
        f
        for f in found
        if heads[" ".join(f["query"].lower().split()[:5])] == 1
        and bodies[f["content"].split(":", 1)[-1]] == 1
    ]
    return sample(
        unique, prefix="p", style="param", per_package=PER_PACKAGE, total=TOTAL, seed=SEED
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="print statistics, write nothing")
    args = parser.parse_args(argv)
    docs, queries = build()
    pkgs = collections.Counter(d["title"].split(".")[0] for d in docs)
    splits = collections.Counter(str(q["split"]) for q in queries)
    print(f"{len(docs)} documents from {len(pkgs)} packages; queries {dict(splits)}")
    print("most documents:", ", ".join(f"{p} {n}" for p, n in pkgs.most_common(12)))
    for q in queries[:8]:
        print(" ", q["query"])
    if args.check:
        return
    write(OUT, docs, queries)


if __name__ == "__main__":
    main()
