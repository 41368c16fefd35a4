"""SQL of the re-embedding job (``cairn reembed``): which visible rows lack a
current vector under a model, and their texts.

"Current" means what the live worker and the index rebuild mean by it: a
stored vector under the model whose ``text_hash`` is the SHA-256 of the row's
``text_sql`` now (``storage.models.search``). A row whose text changed since
it was embedded is therefore stale again, and a rerun of the job skips every
row that is already done.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import bindparam, text
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.repositories.search import UUIDS, hash_sql, searchable, stale_sql


async def count_stale(session: AsyncSession, kind: str, model: str) -> int:
    """How many visible rows of ``kind`` lack a current vector under ``model``."""
    s = searchable(kind)
    row = (
        await session.exec(  # type: ignore[call-overload]
            text(f"SELECT count(*) FROM {s.table} t WHERE {stale_sql(s)}").bindparams(  # noqa: S608
                kind=kind, model=model
            )
        )
    ).one()
    return int(row[0])


async def stale_ids(
    session: AsyncSession, kind: str, model: str, after: uuid.UUID | None, limit: int
) -> list[uuid.UUID]:
    """The next ``limit`` ids (ascending, past ``after``) of rows lacking a
    current vector under ``model``: keyset pagination, so each page is one
    index range scan however far the job has got."""
    s = searchable(kind)
    keyset = "" if after is None else "AND t.id > :after "
    statement = text(
        f"SELECT t.id FROM {s.table} t WHERE {stale_sql(s)} {keyset}"  # noqa: S608
        f"ORDER BY t.id LIMIT :limit"
    ).bindparams(kind=kind, model=model, limit=limit)
    if after is not None:
        statement = statement.bindparams(after=after)
    rows = await session.exec(statement)  # type: ignore[call-overload]
    return [r[0] for r in rows]


async def stale_texts(
    session: AsyncSession, kind: str, model: str, item_ids: Sequence[uuid.UUID]
) -> list[tuple[uuid.UUID, str, bytes]]:
    """(id, text, sha256 of that text) of those among ``item_ids`` that still
    lack a current vector under ``model``, read in one statement so that the
    hash stored with a vector is the hash of the text it was made from."""
    if not item_ids:
        return []
    s = searchable(kind)
    rows = await session.exec(  # type: ignore[call-overload]
        text(
            f"SELECT t.id, {s.text_sql}, {hash_sql(s)} FROM {s.table} t "  # noqa: S608
            f"WHERE t.id = ANY(:ids) AND {stale_sql(s)} ORDER BY t.id"
        ).bindparams(bindparam("ids", list(item_ids), type_=UUIDS), kind=kind, model=model)
    )
    return [(r[0], str(r[1]), bytes(r[2])) for r in rows]
