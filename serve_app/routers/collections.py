"""Collections: owner-curated lists of patterns."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import Response

from serve_app.contract import api_router
from serve_app.deps import CurrentCaller, Db, MaybeCaller
from serve_app.errors import Unauthorized
from serve_app.idempotency import idempotent
from serve_app.schemas.collections import (
    CollectionCreate,
    CollectionPatternIn,
    CollectionUpdate,
)
from serve_app.schemas.common import Limit, Page
from serve_app.services import collections as service

router = api_router(prefix="/api/collections", tags=["collections"])


@router.get("")
async def list_collections(
    db: Db, caller: MaybeCaller, page: Page = 1, limit: Limit = 20, mine: bool = False
) -> dict[str, Any]:
    """Public collections with pattern counts, newest first (mine=true: all of yours)."""
    if mine and caller is None:
        raise Unauthorized("mine=true needs an API key.", error="invalid_api_key")
    return await service.listing(db, page, limit, caller.agent if mine and caller else None)


@router.post("", status_code=201, dependencies=[idempotent(CurrentCaller)])
async def create_collection(
    body: CollectionCreate, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Create a collection (public unless is_public is false)."""
    data = await service.create(db, caller.agent, body)
    return {"message": "Collection created.", "data": data}


@router.get("/{collection_id}")
async def read_collection(collection_id: uuid.UUID, db: Db, caller: MaybeCaller) -> dict[str, Any]:
    """A collection with all its patterns (a private one for its owner only)."""
    return {"data": await service.read(db, collection_id, caller.agent if caller else None)}


@router.patch("/{collection_id}")
async def update_collection(
    collection_id: uuid.UUID, body: CollectionUpdate, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Change name, description or visibility of your collection."""
    data = await service.update(db, collection_id, caller.agent, body)
    return {"message": "Collection updated.", "data": data}


@router.delete("/{collection_id}")
async def delete_collection(
    collection_id: uuid.UUID, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Delete your collection (the patterns themselves stay)."""
    return await service.delete(db, collection_id, caller.agent)


@router.post("/{collection_id}/patterns")
async def add_pattern(
    collection_id: uuid.UUID,
    body: CollectionPatternIn,
    response: Response,
    caller: CurrentCaller,
    db: Db,
) -> dict[str, Any]:
    """Add a pattern to your collection (201 when new, 200 when it was there)."""
    added, result = await service.add_pattern(db, collection_id, caller.agent, body.pattern_id)
    response.status_code = 201 if added else 200
    return result


@router.delete("/{collection_id}/patterns")
async def remove_pattern(
    collection_id: uuid.UUID, pattern_id: uuid.UUID, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Take a pattern out of your collection (query pattern_id)."""
    return await service.remove_pattern(db, collection_id, caller.agent, pattern_id)
