"""The labelled safety cases (cases.jsonl) and the benign corpora.

``cases.jsonl`` holds hand-written cases, one a line: ``expect`` (``secret``,
``hidden``, ``hold``, ``label`` or ``pass``), ``kind`` (for labels, the label
kind), ``field_kind`` (plain, markdown, code) and ``text``. Secrets are
written as templates (``{{aws_id}}``, ``{{b64:40}}``, ``{{pem}}``…) and
expanded here with a seeded generator, so the repository holds no string a
secret scanner would flag and every run sees the same values.
"""

from __future__ import annotations

import ast
import base64
import gzip
import json
import random
import re
import string
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
EVAL = HERE.parent / "search_eval"


@dataclass(frozen=True)
class Case:
    expect: str
    kind: str
    field_kind: str
    text: str
    note: str


def _jwt(rng: random.Random) -> str:
    def enc(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    sig = base64.urlsafe_b64encode(rng.randbytes(32)).rstrip(b"=").decode()
    claims = {"sub": f"agent-{rng.randrange(10**6)}", "exp": 1_900_000_000 + rng.randrange(10**6)}
    return f"{enc({'alg': 'HS256', 'typ': 'JWT'})}.{enc(claims)}.{sig}"


def _pem(rng: random.Random) -> str:
    body = base64.b64encode(rng.randbytes(600)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return (
        "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END RSA PRIVATE KEY-----"
    )


def _expand(template: str, rng: random.Random) -> str:
    alnum = string.ascii_letters + string.digits

    def one(m: re.Match[str]) -> str:
        name, _, n = m.group(1).partition(":")
        size = int(n) if n else 0
        pools = {
            "alnum": alnum,
            "alpha": string.ascii_letters,
            "digits": string.digits,
            "lowerhex": "0123456789abcdef",
            "b64": alnum + "+/",
            "urlsafe": alnum + "-_",
        }
        if name in pools:
            return "".join(rng.choice(pools[name]) for _ in range(size))
        if name == "aws_id":
            return "AKIA" + "".join(
                rng.choice(string.ascii_uppercase + "234567") for _ in range(16)
            )
        if name == "jwt":
            return _jwt(rng)
        if name == "pem":
            return _pem(rng)
        if name == "cairn_key":
            key_id = "".join(rng.choice("0123456789abcdef") for _ in range(12))
            return f"cairn_{key_id}_" + "".join(rng.choice(alnum + "-_") for _ in range(43))
        raise ValueError(f"unknown template {name}")

    return re.sub(r"\{\{([a-z0-9_]+(?::\d+)?)\}\}", one, template)


def load_cases(seed: int = 49) -> list[Case]:
    rng = random.Random(seed)
    out = []
    with (HERE / "cases.jsonl").open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            text = _expand(row["text"], rng) if row["expect"] == "secret" else row["text"]
            out.append(
                Case(row["expect"], row["kind"], row["field_kind"], text, row.get("note", ""))
            )
    return out


def eval_documents() -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    """The search-eval documents and code as items: (id, [(field, text, kind)])."""
    for path in (
        EVAL / "corpus.jsonl.gz",
        EVAL / "code" / "corpus.jsonl.gz",
        EVAL / "params" / "corpus.jsonl.gz",
    ):
        if not path.exists():
            continue
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                doc = json.loads(line)
                code = path.parent.name in ("code", "params")
                yield (
                    doc["id"],
                    [
                        ("title", doc.get("title", ""), "plain"),
                        ("description", doc.get("description", ""), "markdown"),
                        ("content", doc.get("content", ""), "code" if code else "markdown"),
                    ],
                )


def package_docstrings(
    limit: int, seed: int = 49
) -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    """Docstrings of the installed packages (site-packages), a seeded sample."""
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    files = sorted(site.glob("*/**/*.py"))
    rng = random.Random(seed)
    rng.shuffle(files)
    n = 0
    for path in files:
        if "/tests/" in str(path) or "/test/" in str(path):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError, OSError, RecursionError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=True)
                if doc and len(doc) >= 80:
                    name = f"{path.relative_to(site)}:{getattr(node, 'name', '<module>')}"
                    yield name, [("description", doc, "markdown")]
                    n += 1
                    if n >= limit:
                        return
