"""Checks on the category a pattern or question names."""

from __future__ import annotations

from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.errors import BadRequest
from serve_app.services import views
from storage.repositories import categories as repo


async def check(db: AsyncSession, changes: dict[str, Any]) -> None:
    """A ``category_id`` among the changes must name an existing category (400)."""
    category_id = changes.get("category_id")
    if category_id is not None and not await repo.exists(db, category_id):
        raise BadRequest(f"category_id: no category {category_id}", error="validation_error")


async def listed(db: AsyncSession) -> list[dict[str, Any]]:
    """Every category, in the order lists show them."""
    return [views.category(c) for c in await repo.all_ordered(db)]
