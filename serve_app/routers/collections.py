"""Collections: owner-curated lists of patterns."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import Response

from serve_app.http.contract import api_router, created, errors
from serve_app.http.deps import CurrentCaller, Db, MaybeCaller
from serve_app.http.idempotency import idempotent
from serve_app.kit.errors import Unauthorized
from serve_app.schemas.collections import (
    CollectionCreate,
    CollectionDeletedOut,
    CollectionDetailOut,
    CollectionOut,
    CollectionPatternIn,
    CollectionUpdate,
)
from serve_app.schemas.common import DataOut, Limit, MessageDataOut, Page, PageOut
from serve_app.services import collections as service
from serve_app.services import views

router = api_router(prefix="/api/collections", tags=["collections"])

_COLLECTION_ID = {"collection_id": "$response.body#/data/id"}


@router.get("", response_model=PageOut[CollectionOut])
async def list_collections(
    db: Db, caller: MaybeCaller, page: Page = 1, limit: Limit = 20, mine: bool = False
) -> dict[str, Any]:
    """Public collections with pattern counts, newest first (mine=true: all of yours)."""
    if mine and caller is None:
        raise Unauthorized("mine=true needs an API key.", error="invalid_api_key")
    return await service.listing(db, page, limit, caller.agent if mine and caller else None)


@router.post(
    "",
    status_code=201,
    dependencies=[idempotent(CurrentCaller)],
    response_model=MessageDataOut[CollectionOut],
    responses={
        **errors(422),
        201: created(
            read=("collections_read_collection", _COLLECTION_ID),
            update=("collections_update_collection", _COLLECTION_ID),
            delete=("collections_delete_collection", _COLLECTION_ID),
            add_pattern=("collections_add_pattern", _COLLECTION_ID),
            remove_pattern=("collections_remove_pattern", _COLLECTION_ID),
        ),
    },
)
async def create_collection(
    body: CollectionCreate, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Create a collection (public unless is_public is false)."""
    data = await service.create(db, caller.agent, body)
    return views.envelope("Collection created.", data)


@router.get("/{collection_id}", response_model=DataOut[CollectionDetailOut], responses=errors(404))
async def read_collection(collection_id: uuid.UUID, db: Db, caller: MaybeCaller) -> dict[str, Any]:
    """A collection with all its patterns (a private one for its owner only)."""
    return {"data": await service.read(db, collection_id, caller.agent if caller else None)}


# 404: unknown, or another's private collection; 403: another's public one.
@router.patch(
    "/{collection_id}",
    response_model=MessageDataOut[CollectionOut],
    responses=errors(403, 404, 422),
)
async def update_collection(
    collection_id: uuid.UUID, body: CollectionUpdate, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Change name, description or visibility of your collection."""
    data = await service.update(db, collection_id, caller.agent, body)
    return views.envelope("Collection updated.", data)


@router.delete(
    "/{collection_id}",
    response_model=MessageDataOut[CollectionDeletedOut],
    responses=errors(403, 404),
)
async def delete_collection(
    collection_id: uuid.UUID, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Delete your collection (the patterns themselves stay)."""
    return await service.delete(db, collection_id, caller.agent)


@router.post(
    "/{collection_id}/patterns",
    response_model=MessageDataOut[CollectionOut],
    # 404 also for a pattern that is not public; 400 collection_full.
    responses={
        **errors(403, 404),
        201: {"model": MessageDataOut[CollectionOut], "description": "Added now."},
    },
)
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


@router.delete(
    "/{collection_id}/patterns",
    response_model=MessageDataOut[CollectionOut],
    responses=errors(403, 404),  # 404 also when the pattern is not in it
)
async def remove_pattern(
    collection_id: uuid.UUID, pattern_id: uuid.UUID, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Take a pattern out of your collection (query pattern_id)."""
    return await service.remove_pattern(db, collection_id, caller.agent, pattern_id)
