"""Collections: named, owner-curated lists of patterns, public or private."""

from __future__ import annotations

import uuid
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.errors import BadRequest, Forbidden, NotFound
from serve_app.schemas.collections import CollectionCreate, CollectionUpdate
from serve_app.services import screening, views
from serve_app.services.patterns import visible
from storage.models import Agent, Collection
from storage.models.base import utcnow
from storage.repositories import collections as repo

# The detail read returns every pattern, so a collection's size is bounded
# (docs/decisions/resources.md, "Collections").
MAX_PATTERNS = 1000


def _missing(collection_id: uuid.UUID) -> NotFound:
    return NotFound(f"No collection {collection_id}.")


def _screened(name: str | None, description: str | None) -> list[screening.Field]:
    return screening.text_fields(name=(name, "plain"), description=(description, "markdown"))


async def create(db: AsyncSession, caller: Agent, body: CollectionCreate) -> dict[str, Any]:
    await screening.check_unheld(db, _screened(body.name, body.description), kind="collection")
    collection = await repo.insert_collection(
        db,
        Collection(
            owner_id=caller.id,
            name=body.name,
            description=body.description,
            is_public=body.is_public,
        ),
    )
    return views.collection(collection, caller, 0)


async def listing(
    db: AsyncSession, page: int, limit: int, owner: Agent | None = None
) -> dict[str, Any]:
    rows, total = await repo.listing(db, page, limit, owner.id if owner else None)
    return views.paged([views.collection(c, a, n) for c, a, n in rows], page, limit, total)


async def read(db: AsyncSession, collection_id: uuid.UUID, caller: Agent | None) -> dict[str, Any]:
    """A collection with all its (public) patterns; a private one only for its owner."""
    found = await repo.with_count(db, collection_id)
    if found is None:
        raise _missing(collection_id)
    collection, owner, count = found
    if not collection.is_public and (caller is None or caller.id != collection.owner_id):
        raise _missing(collection_id)
    rows = await repo.patterns_of(db, collection.id)
    return {
        **views.collection(collection, owner, count),
        "patterns": [
            {**views.pattern_item(p, a, c), "added_at": views.iso(cp.added_at)}
            for p, a, c, cp in rows
        ],
    }


async def _owned(db: AsyncSession, collection_id: uuid.UUID, caller: Agent) -> Collection:
    collection = await repo.get(db, collection_id, for_update=True)
    if collection is None:
        raise _missing(collection_id)
    if collection.owner_id != caller.id:
        if not collection.is_public:
            raise _missing(collection_id)  # a private collection's existence is not told
        raise Forbidden("Only the owner can change this collection.")
    return collection


async def _shown(db: AsyncSession, collection: Collection, owner: Agent) -> dict[str, Any]:
    found = await repo.with_count(db, collection.id)
    assert found is not None
    return views.collection(collection, owner, found[2])


async def update(
    db: AsyncSession, collection_id: uuid.UUID, caller: Agent, body: CollectionUpdate
) -> dict[str, Any]:
    collection = await _owned(db, collection_id, caller)
    changes = body.model_dump(exclude_unset=True)
    for field in ("name", "is_public"):
        if field in changes and changes[field] is None:
            raise BadRequest(f"{field}: may not be null", error="validation_error")
    if "description" in changes and changes["description"] is None:
        changes["description"] = ""
    await screening.check_unheld(
        db, _screened(changes.get("name"), changes.get("description")), kind="collection"
    )
    for field, value in changes.items():
        setattr(collection, field, value)
    collection.updated_at = utcnow()
    await db.flush()
    return await _shown(db, collection, caller)


async def delete(db: AsyncSession, collection_id: uuid.UUID, caller: Agent) -> dict[str, Any]:
    collection = await _owned(db, collection_id, caller)
    await repo.delete_collection(db, collection.id)
    return views.envelope("Collection deleted.", {"id": str(collection.id)})


async def add_pattern(
    db: AsyncSession, collection_id: uuid.UUID, caller: Agent, pattern_id: uuid.UUID
) -> tuple[bool, dict[str, Any]]:
    """(added, body): adding a pattern that is already there changes nothing."""
    collection = await _owned(db, collection_id, caller)
    pattern = await visible(db, str(pattern_id))
    if (
        not await repo.holds(db, collection.id, pattern.id)
        and await repo.stored_count(db, collection.id) >= MAX_PATTERNS
    ):
        raise BadRequest(
            f"A collection holds at most {MAX_PATTERNS} patterns.", error="collection_full"
        )
    added = await repo.add_pattern(db, collection.id, pattern.id)
    if added:
        collection.updated_at = utcnow()
        await db.flush()
    return added, views.envelope(
        "Pattern added to the collection." if added else "Already in the collection.",
        await _shown(db, collection, caller),
    )


async def remove_pattern(
    db: AsyncSession, collection_id: uuid.UUID, caller: Agent, pattern_id: uuid.UUID
) -> dict[str, Any]:
    collection = await _owned(db, collection_id, caller)
    removed = await repo.remove_pattern(db, collection.id, pattern_id)
    if not removed:
        raise NotFound(f"Pattern {pattern_id} is not in this collection.")
    collection.updated_at = utcnow()
    await db.flush()
    return views.envelope(
        "Pattern removed from the collection.", await _shown(db, collection, caller)
    )
