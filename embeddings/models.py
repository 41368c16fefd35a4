"""``cairn models``: the stored model versions (``embeddings.modelstore``),
the active model and the log of switches, as the command prints them.
Activation itself is ``cairn reembed``'s (re-embed, then swap)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings.config import DEFAULT_MODEL
from storage.repositories import search as search_repo
from storage.repositories import tuning as repo

T = TypeVar("T")


def _with_session(url: str, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    from storage.db import make_engine, make_sessionmaker

    async def go() -> T:
        engine = make_engine(url, pool_size=1, max_overflow=0)
        try:
            async with make_sessionmaker(engine)() as session:
                return await work(session)
        finally:
            await engine.dispose()

    return asyncio.run(go())


def _mrr(card: dict[str, Any]) -> str:
    gate = card.get("gate") or {}
    if "tuned_mean_mrr10" not in gate:
        return "-"
    return f"{gate['base_mean_mrr10']:.4f} -> {gate['tuned_mean_mrr10']:.4f}"


def list_versions(url: str) -> int:
    """Print every stored version, the active model marked."""

    async def work(session: AsyncSession) -> tuple[str, list[repo.VersionRow]]:
        active = await search_repo.active_model(session) or DEFAULT_MODEL
        return active, await repo.versions(session)

    active, rows = _with_session(url, work)
    print(f"{'':2}{'name':40} {'base':28} {'MiB':>7}  {'mean MRR@10 base -> tuned':27} created")
    names = {r.name for r in rows}
    if active not in names:
        print(f"* {active:40} {'(packaged or a path)':28}")
    for r in rows:
        mark = "*" if r.name == active else " "
        state = "" if r.complete else " (incomplete)"
        print(
            f"{mark} {r.name:40} {r.base[:28]:28} {r.size / 2**20:7.1f}  {_mrr(r.card):27} "
            f"{r.created_at:%Y-%m-%d %H:%M}{state}"
        )
    return 0


def _missing(name: str) -> int:
    print(f"cairn models: no model version named {name!r} (cairn models list)", file=sys.stderr)
    return 1


def show(url: str, name: str) -> int:
    """Print a version's model card."""
    from embeddings.tune import card_markdown

    async def work(session: AsyncSession) -> tuple[repo.VersionRow | None, str | None]:
        return await repo.version(session, name), await search_repo.active_model(session)

    row, active = _with_session(url, work)
    if row is None:
        return _missing(name)
    print(
        f"{row.name}: base {row.base}, {row.size / 2**20:.1f} MiB in {row.chunks} chunks, "
        f"SHA-256 {row.sha256}, {'complete' if row.complete else 'INCOMPLETE'}, "
        f"{'active' if row.name == active else 'not active'}"
    )
    if row.card.get("gate"):
        print(card_markdown(row.card))
    return 0


def check_exists(url: str, name: str) -> bool:
    """Is ``name`` a stored, complete version? Says why not."""

    async def work(session: AsyncSession) -> repo.VersionRow | None:
        return await repo.version(session, name)

    row = _with_session(url, work)
    if row is None:
        _missing(name)
        return False
    if not row.complete:
        print(f"cairn models: version {name!r} was not stored completely", file=sys.stderr)
        return False
    return True


def previous(url: str) -> str | None:
    """The model active before the current one (None, said why, if none)."""

    async def work(session: AsyncSession) -> tuple[str | None, list[str]]:
        active = await search_repo.active_model(session)
        return active, [m for m, _ in await repo.activations(session)]

    active, log = _with_session(url, work)
    earlier = next((m for m in log if m != active), None)
    if earlier is None:
        print(
            f"cairn models: no earlier model to roll back to ({active!r} is the only one used)",
            file=sys.stderr,
        )
    return earlier
