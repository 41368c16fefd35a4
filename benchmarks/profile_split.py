"""Where an app process's CPU goes, from ``py-spy record -f raw`` files: a
sample is charged to the component of its innermost frame that is not
plumbing (asyncio, contextlib, …), idle threads dropped. ``split_files``
answers each component's share of the busy samples, ``admission_files`` each
step of admission's; ``http_bench --profile`` turns them into ms per request.

    python -m benchmarks.profile_split spy-profile-*.txt
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

COMPONENTS = (
    "Serve replica wrapper and metrics",
    "Ray actor calls",
    "uvicorn HTTP",
    "our middleware",
    "FastAPI/Starlette",
    "pydantic and JSON",
    "SQLAlchemy/SQLModel",
    "psycopg",
    "our routes, services, repositories",
    "asyncio, logging, stdlib",
)
# What Cairn runs only under Serve (issue 46's target: at most 5% of a
# request's CPU): charged when any frame of a sample is in it, before the
# innermost-frame rule, so Ray's metric and actor calls under it count too.
SERVE_ONLY = "Cairn under Serve only"

_FILE = re.compile(r"\((.*?)(?::\d+)?\)$")
# Frames that only pass work along: charged to the frame that called them.
_PLUMBING = ("/asyncio/", "contextlib.py", "threading.py", "functools.py", "typing.py", "<frozen",
             "/anyio/", "/sniffio/", "/concurrent/", "weakref.py", "_weakrefset.py", "/greenlet/",
             "selectors.py", "queue.py")  # fmt: skip
_OURS_MIDDLEWARE = ("serve_app/app.py", "serve_app/http/querystring.py")
_BY_PATH = (
    ("/ray/serve/", "Serve replica wrapper and metrics"),
    ("/ray/", "Ray actor calls"),
    ("/uvicorn/", "uvicorn HTTP"),
    ("/httptools/", "uvicorn HTTP"),
    ("/h11/", "uvicorn HTTP"),
    ("/fastapi/", "FastAPI/Starlette"),
    ("/starlette/", "FastAPI/Starlette"),
    ("/pydantic", "pydantic and JSON"),
    ("/json/", "pydantic and JSON"),
    ("orjson", "pydantic and JSON"),
    ("/sqlalchemy/", "SQLAlchemy/SQLModel"),
    ("/sqlmodel/", "SQLAlchemy/SQLModel"),
    ("/psycopg", "psycopg"),
    ("serve_app/", "our routes, services, repositories"),
    ("storage/", "our routes, services, repositories"),
    ("actors/", "our routes, services, repositories"),
    ("embeddings/", "our routes, services, repositories"),
)


def _path(frame: str) -> str:
    found = _FILE.search(frame)
    return found.group(1) if found else ""


def _idle(frames: list[str]) -> bool:
    """A thread waiting in native code: no Python work of its own."""
    if not frames or not frames[-1]:
        return True
    leaf = frames[-1]
    return leaf.startswith(("Worker.main_loop", "Thread.run", "Thread._bootstrap")) or (
        "sleep" in leaf and len(frames) <= 3
    )


# Files, or (file, classes) whose lines, Cairn runs only under Serve: the
# metric records (no-ops outside Ray), the actor-backed rate limiter,
# trending and dispatch that stand in for the local ones, the replicas' own
# set-up (replicas/), and the cluster actor handles.
_SERVE_ONLY_FILES = ("telemetry/metrics.py", "serve_app/runtime/cluster_actor.py", "replicas/")
_SERVE_ONLY_CLASSES = {
    "serve_app/runtime/ratelimit.py": ("RayRateLimiter",),
    "serve_app/runtime/trending.py": ("RayTrending",),
    "serve_app/runtime/dispatch.py": ("RayDispatch",),
}


def _class_lines() -> dict[str, list[tuple[int, int]]]:
    """Each _SERVE_ONLY_CLASSES file's line ranges of those classes."""
    import ast

    root = Path(__file__).resolve().parents[1]
    found: dict[str, list[tuple[int, int]]] = {}
    for name, classes in _SERVE_ONLY_CLASSES.items():
        tree = ast.parse((root / name).read_text())
        found[name] = [
            (node.lineno, node.end_lineno or node.lineno)
            for node in tree.body
            if isinstance(node, ast.ClassDef) and node.name in classes
        ]
    return found


_SERVE_ONLY_LINES = _class_lines()
_LINE = re.compile(r":(\d+)\)$")


def serve_only(frame: str) -> bool:
    """Whether ``frame`` is in code Cairn runs only under Serve."""
    path = _path(frame)
    if not path:
        return False
    if any(part in path for part in _SERVE_ONLY_FILES):
        return True
    for name, ranges in _SERVE_ONLY_LINES.items():
        if path.endswith(name):
            line = _LINE.search(frame)
            return line is not None and any(a <= int(line.group(1)) <= b for a, b in ranges)
    return False


def component(frames: list[str]) -> str | None:
    """The component a sample is charged to (None: idle)."""
    if _idle(frames):
        return None
    if any(serve_only(frame) for frame in frames):
        return SERVE_ONLY
    for frame in reversed(frames):
        path = _path(frame)
        if not path or any(p in path for p in _PLUMBING):
            continue
        if any(path.endswith(m) for m in _OURS_MIDDLEWARE):
            return "our middleware"
        for part, name in _BY_PATH:
            if part in path or path.startswith(part.lstrip("/")):
                return name
        return "asyncio, logging, stdlib"
    return "asyncio, logging, stdlib"


def samples(paths: Iterable[Path]) -> Iterator[tuple[list[str], int]]:
    """Each stack (outermost frame first) in these raw py-spy files, and its count."""
    for path in paths:
        with path.open() as fh:
            for line in fh:
                stack, _, n = line.rstrip("\n").rpartition(" ")
                if n.isdigit():
                    yield (stack.split(";") if stack else []), int(n)


# The steps of admission (serve_app/http/admission.py) a sample is inside of,
# by the innermost frame that names one: what a request's cold path costs.
ADMISSION_PARTS = ("identify (API key check)", "budgets (rate limit)", "client address",
                   "admission, other")  # fmt: skip
_ADMISSION_FUNCS = {
    "authenticate": "identify (API key check)",
    "_identify": "identify (API key check)",
    "charge": "budgets (rate limit)",
    "client_address": "client address",
    "admit": "admission, other",
}


def admission_part(frames: list[str]) -> str | None:
    """The admission step a busy sample is spent in (None: idle or not admission)."""
    if _idle(frames):
        return None
    for frame in reversed(frames):
        path = _path(frame)
        if path.endswith("serve_app/runtime/ratelimit.py"):
            return "budgets (rate limit)"
        if path.endswith("serve_app/http/admission.py"):
            name = _ADMISSION_FUNCS.get(frame.split(" (", 1)[0].strip())
            if name is not None:
                return name
    return None


def admission_files(paths: Iterable[Path]) -> dict[str, float]:
    """Each admission step's share of all busy samples in these files."""
    found: Counter[str] = Counter()
    busy = 0
    for frames, n in samples(paths):
        if not _idle(frames):
            busy += n
            if (part := admission_part(frames)) is not None:
                found[part] += n
    return {name: found[name] / busy for name in ADMISSION_PARTS} if busy else {}


def split_files(paths: Iterable[Path]) -> dict[str, float]:
    """Each component's share of the busy samples in these files."""
    found: Counter[str] = Counter()
    for frames, n in samples(paths):
        if (name := component(frames)) is not None:
            found[name] += n
    total = sum(found.values())
    return {name: found[name] / total for name in (*COMPONENTS, SERVE_ONLY)} if total else {}


def main(argv: list[str]) -> None:
    shares = split_files(Path(p) for p in argv)
    for name, share in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"{100 * share:5.1f}%  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
