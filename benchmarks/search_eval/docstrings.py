"""Documents from Python docstrings (the standard library and the installed
packages, read with ``ast``) and from the package READMEs (``METADATA``)."""

from __future__ import annotations

import ast
import email.parser
import re
from collections.abc import Iterator
from pathlib import Path

from benchmarks.search_eval.config import MIN_CONTENT, SITE, SKIP_DIRS, STDLIB, STDLIB_SKIP
from benchmarks.search_eval.documents import is_prose
from benchmarks.search_eval.text import Raw, clip, first_sentence, squash

# --------------------------------------------------------------------------- python docstrings

ROLE = re.compile(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")


def clean_rst(text: str) -> str:
    text = ROLE.sub(r"\1", text)
    text = re.sub(r"``([^`]*)``", r"\1", text)
    text = re.sub(r"`([^`<]*?)\s*<[^>]*>`_+", r"\1", text)
    text = re.sub(r"`([^`]*)`_*", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    lines = []
    for line in text.splitlines():
        s = line.strip()
        if re.match(r"\.\. (\w[\w-]*)::", s):
            m = re.match(r"\.\. (\w[\w-]*)::\s*(.*)", s)
            assert m
            kind, arg = m.group(1), m.group(2)
            if kind in (
                "note",
                "warning",
                "seealso",
                "deprecated",
                "versionadded",
                "versionchanged",
            ):
                lines.append(line.replace(s, f"{kind.capitalize()}: {arg}".rstrip(": ")))
            continue
        if s.startswith(".. "):
            continue
        if re.fullmatch(r"[-=~^]{3,}", s):
            continue
        lines.append(line.rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    public = [p for p in parts if not p.startswith("_")] or parts[:1]
    return ".".join(public)


def py_files(group: str) -> Iterator[tuple[Path, Path]]:
    if group == "stdlib":
        root = STDLIB
        for p in sorted(STDLIB.rglob("*.py")):
            rel = p.relative_to(STDLIB).parts
            if rel[0] in STDLIB_SKIP or any(part in SKIP_DIRS for part in rel[:-1]):
                continue
            if rel[0].startswith(("_", "test")) and rel[0] != "__future__.py":
                continue
            yield root, p
        return
    base = SITE / group
    if not base.exists():
        return
    for p in sorted(base.rglob("*.py")):
        rel = p.relative_to(SITE).parts
        if any(part in SKIP_DIRS for part in rel[:-1]) or p.name.startswith("test_"):
            continue
        if (
            group == "transformers"
            and "models" in rel
            and not any(m in rel for m in ("bert", "gpt2", "t5", "llama", "clip", "whisper", "vit"))
        ):
            continue
        yield SITE, p


def signature(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, name: str) -> str:
    if isinstance(node, ast.ClassDef):
        init = next(
            (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
            None,
        )
        if init is None:
            bases = ", ".join(ast.unparse(b) for b in node.bases)
            return f"class {name}({bases})" if bases else f"class {name}"
        args = init.args
        args = ast.arguments(
            posonlyargs=args.posonlyargs,
            args=args.args[1:],
            vararg=args.vararg,
            kwonlyargs=args.kwonlyargs,
            kw_defaults=args.kw_defaults,
            kwarg=args.kwarg,
            defaults=args.defaults[-len(args.args[1:]) :] if args.args[1:] else [],
        )
        return f"class {name}({_unparse_args(args)})"
    prefix = "async def " if isinstance(node, ast.AsyncFunctionDef) else "def "
    return f"{prefix}{name}({_unparse_args(node.args)})"


def _unparse_args(args: ast.arguments) -> str:
    try:
        text = ast.unparse(args)
    except Exception:
        return "..."
    text = re.sub(r"^self,?\s*|^cls,?\s*", "", text)
    return clip(text, 200)


def docstring_items(tree: ast.Module, module: str) -> Iterator[tuple[str, str, str]]:
    """(qualified name, signature, docstring) of public functions, classes and methods."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            qual = f"{module}.{node.name}"
            if doc:
                yield qual, signature(node, node.name), doc
            if isinstance(node, ast.ClassDef):
                for sub in node.body:
                    if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef) and not (
                        sub.name.startswith("_")
                    ):
                        sdoc = ast.get_docstring(sub)
                        if sdoc:
                            yield f"{qual}.{sub.name}", signature(sub, sub.name), sdoc


def split_docstring(doc: str) -> tuple[str, str] | None:
    doc = clean_rst(doc)
    paras = re.split(r"\n\s*\n", doc, maxsplit=1)
    head = squash(paras[0])
    rest = paras[1] if len(paras) > 1 else ""
    summary, tail = first_sentence(head)
    if tail:
        rest = tail + "\n\n" + rest
    return summary, rest.strip()


def collect_py(group: str) -> list[Raw]:
    raws = []
    for root, path in py_files(group):
        try:
            src = path.read_text(errors="replace")
            if len(src) > 2_000_000:
                continue
            tree = ast.parse(src)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        module = module_name(path, root)
        for qual, sig, doc in docstring_items(tree, module):
            if len(doc) < 250 or "deprecated" in doc[:200].lower():
                continue
            split = split_docstring(doc)
            if split is None:
                continue
            summary, rest = split
            words = summary.split()
            if not (4 <= len(words) <= 30) or not re.match(r"[A-Z]", summary):
                continue
            if len(rest) < MIN_CONTENT or summary.lower().startswith(("see ", "alias", "same as")):
                continue
            if any(ch in summary for ch in "{}|>") or "%" in summary:
                continue
            raws.append(
                Raw(
                    source=f"py:{qual}",
                    group=group,
                    name=qual,
                    summary=summary.rstrip("."),
                    body=rest,
                    lead=sig,
                )
            )
    return raws


# --------------------------------------------------------------------------- package READMEs


def strip_markdown(text: str) -> str:
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"<[^>\n]+>", " ", text)
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", " ", text)
    text = re.sub(r"\[!\[[^\]]*\]\([^)]*\)\]\([^)]*\)", " ", text)
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"^\s*\.\. (image|figure|raw|contents|_[^:]*):.*$", " ", text, flags=re.M)
    text = re.sub(r"^\s*:(target|alt|width|height|align):.*$", " ", text, flags=re.M)
    text = re.sub(r"^#+\s*", "", text, flags=re.M)
    text = re.sub(r"\|[^|\n]{1,40}\|_?", " ", text)
    text = re.sub(r"^\s*[+|][-=+| ]*$", " ", text, flags=re.M)
    text = re.sub(r"^\s*:[a-z]+:\s*$", " ", text, flags=re.M)
    text = clean_rst(text)
    text = re.sub(r"https?://\S+", " ", text)
    text = re.sub(r"[ \t]+", " ", text)
    return re.sub(r"\n\s*\n+", "\n\n", text).strip()


def collect_readmes() -> list[Raw]:
    raws = []
    for meta in sorted(SITE.glob("*.dist-info/METADATA")):
        msg = email.parser.Parser().parsestr(meta.read_text(errors="replace"))
        name, summary = msg.get("Name", ""), squash(msg.get("Summary", "") or "")
        body = msg.get_payload()
        if not isinstance(body, str) or not name or name.lower() == "cairn":
            continue
        if name.startswith("types-") or name.endswith("2") or name.endswith("-binary"):
            continue
        paras = strip_markdown(body).split("\n\n")
        while paras and not (is_prose(paras[0]) and len(paras[0]) >= 60):
            paras.pop(0)
        body = "\n\n".join(paras)
        summary = re.sub(rf"^{re.escape(name)}\s*[-:\u2013\u2014]\s*", "", summary, flags=re.I)
        words = summary.split()
        if len(body) < 600 or not (3 <= len(words) <= 25):
            continue
        raws.append(
            Raw(
                source=f"pkg:{name}",
                group="readme",
                name=name,
                summary=summary.rstrip("."),
                body=body,
            )
        )
    return raws
