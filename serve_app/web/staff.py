"""The staff's pages: the moderation queue at /moderation with its tabs and
the approve / reject form; the admin view at /admin with its change forms.
The same service calls as /api/moderation and /api/admin, so the same rules:
a signed-in human who is not staff gets the 403 the API answers
(docs/decisions/web.md, "Moderation pages" and "Admin pages")."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import TypeAdapter, ValidationError
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.context import AppContext
from serve_app.http import admission, identity
from serve_app.http.deps import Ctx, Db, ReadDb
from serve_app.kit.errors import BadRequest
from serve_app.schemas.admin import AdminChange as AdminChangeIn
from serve_app.schemas.moderation import Decision
from serve_app.services import admin as admin_service
from serve_app.services import moderation as moderation_service
from serve_app.web.forms import fields, form_page, human_of, see_other, signin_required
from storage.models import Agent

router = APIRouter(include_in_schema=False, dependencies=[admission.declare(admission.OPEN)])

QUEUE = "/moderation"
QUEUE_LIMIT = 20
PAGE_MAX = 1000
# Each tab of GET /api/moderation: its label, and what a decision in it is about
# (None: a tab to read, with no decision to take).
TABS: dict[str, tuple[str, str | None]] = {
    "pending": ("Pending patterns", "pattern"),
    "flagged": ("Flagged", "pattern"),
    "flags": ("Reports", "pattern"),
    "edited": ("Edited since review", "pattern"),
    "verified_edits": ("Verified items edited", None),
    "pending_questions": ("Pending questions", "question"),
    "pending_answers": ("Pending answers", "answer"),
    "safety": ("Held for safety: patterns", "pattern"),
    "safety_questions": ("Held for safety: questions", "question"),
    "safety_answers": ("Held for safety: answers", "answer"),
    "appeals": ("Appeals", "appeal"),
    "rejected": ("Rejected", "pattern"),
    "logs": ("Log", None),
}


def _tab(value: str | None) -> str:
    tab = value or "pending"
    if tab not in TABS:
        raise BadRequest(f"Unknown tab {tab!r}: one of {', '.join(TABS)}.")
    return tab


def _page(value: str | None) -> int:
    try:
        number = int(value or "1")
    except ValueError:
        number = 0
    if not 1 <= number <= PAGE_MAX:
        raise BadRequest(f"page must be a whole number from 1 to {PAGE_MAX}.")
    return number


async def _queue_page(
    ctx: AppContext,
    request: Request,
    db: AsyncSession,
    human: Agent,
    tab: str,
    page: int,
    status_code: int = 200,
    errors: dict[str, str] | None = None,
    done: str | None = None,
) -> HTMLResponse:
    found: dict[str, Any] = await moderation_service.queue(db, human, tab, page, QUEUE_LIMIT)
    return form_page(
        ctx,
        request,
        "moderation.html",
        status_code,
        human=human,
        tabs=TABS,
        tab=tab,
        kind=TABS[tab][1],
        rows=found["data"],
        pagination=found["pagination"],
        errors=errors or {},
        done=done,
    )


@router.get(QUEUE)
async def queue_page(request: Request, ctx: Ctx, db: ReadDb) -> HTMLResponse:
    """One tab of the moderation queue (moderators and admins)."""
    human = await identity.signed_in_human(ctx, request, db)
    if human is None:
        return signin_required(ctx, request, "Sign in as a moderator to see the moderation queue.")
    params = request.query_params
    done = params.get("done")
    return await _queue_page(
        ctx,
        request,
        db,
        human,
        _tab(params.get("tab")),
        _page(params.get("page")),
        done=done if done in ("approved", "rejected") else None,
    )


def _decision(sent: dict[str, str], kind: str) -> Decision:
    notes = sent.get("notes", "").strip()
    return Decision.model_validate(
        {f"{kind}_id": sent.get("id", ""), "action": sent.get("action", ""), "notes": notes or None}
    )


@router.post(QUEUE, response_model=None)
async def decide(request: Request, ctx: Ctx, db: Db) -> Response:
    """Approve or reject one item of a tab, with an optional reason for its author."""
    sent = await fields(request)
    human = await human_of(ctx, request, db)
    tab = _tab(sent.get("tab"))
    page = _page(sent.get("page"))
    kind = TABS[tab][1]
    if kind is None:
        raise BadRequest(f"Nothing is decided in the {tab!r} tab.")
    try:
        body = _decision(sent, kind)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = "notes" if "notes" in [str(p) for p in problem["loc"]] else "action"
        target = sent.get("row") or sent.get("id", "")
        try:
            uuid.UUID(target)
        except ValueError:
            raise BadRequest("Pick an item of the queue to decide on.") from None
        message = problem["msg"].removeprefix("Value error, ")
        return await _queue_page(
            ctx, request, db, human, tab, page, 400, errors={f"{where}-{target}": message}
        )
    await moderation_service.decide(db, human, body)
    done = moderation_service.STATUS_AFTER[body.action]
    return see_other(f"{QUEUE}?tab={tab}&page={page}&done={done}")


# --- admin -----------------------------------------------------------------------

ADMIN = "/admin"
AdminChange: TypeAdapter[Any] = TypeAdapter(AdminChangeIn)
ADMIN_TABS = {
    "overview": "Overview",
    "users": "Users",
    "patterns": "Patterns",
    "questions": "Questions",
}
# What a row's form may change, per row type: field -> the values offered.
CHANGES: dict[str, dict[str, tuple[str, ...]]] = {
    "user": {
        "role": ("user", "moderator", "admin"),
        "is_active": ("true", "false"),
        "verification_level": ("unverified", "verified"),
    },
    "pattern": {
        "moderation_status": ("approved", "pending", "flagged", "rejected", "held_for_safety"),
        "status": ("published", "archived"),
    },
    "question": {
        "moderation_status": ("approved", "pending", "flagged", "rejected", "held_for_safety"),
        "status": ("open", "closed", "deleted"),
    },
}


def _admin_filters(params: Any) -> dict[str, str | None]:
    return {name: (params.get(name) or None) for name in ("search", "status", "moderation_status")}


@router.get(ADMIN)
async def admin_page(request: Request, ctx: Ctx, db: ReadDb) -> HTMLResponse:
    """The admin view: site-wide counts, or users, patterns or questions with their forms."""
    human = await identity.signed_in_human(ctx, request, db)
    if human is None:
        return signin_required(ctx, request, "Sign in as an admin to see the admin pages.")
    params = request.query_params
    tab = params.get("tab") or "overview"
    if tab not in ADMIN_TABS:
        raise BadRequest(f"Unknown tab {tab!r}: one of {', '.join(ADMIN_TABS)}.")
    filters = _admin_filters(params) if tab != "overview" else {}
    found: dict[str, Any] = await admin_service.view(
        db, human, tab, _page(params.get("page")), QUEUE_LIMIT, **filters
    )
    done = params.get("done")
    return form_page(
        ctx,
        request,
        "admin.html",
        human=human,
        tabs=ADMIN_TABS,
        tab=tab,
        found=found,
        filters=filters,
        changes=CHANGES,
        done=done if done == "changed" else None,
    )


@router.post(ADMIN, response_model=None)
async def admin_change(request: Request, ctx: Ctx, db: Db) -> Response:
    """One admin change (a user's role, activity or verification; a pattern's or
    question's status), the body PATCH /api/admin takes."""
    sent = await fields(request)
    human = await human_of(ctx, request, db)
    kind, field, value = sent.get("type", ""), sent.get("field", ""), sent.get("value", "")
    offered = CHANGES.get(kind, {}).get(field)
    if offered is None or value not in offered:
        raise BadRequest("Pick one of the values the form offers.")
    changed: object = value
    if field == "is_active":
        changed = value == "true"
    elif field == "role" and value == "user":
        changed = None
    try:
        body = AdminChange.validate_json(
            json.dumps({"type": kind, "id": sent.get("id", ""), field: changed})
        )
    except ValidationError:
        raise BadRequest("Pick a row of the list to change.") from None
    await admin_service.change(db, human, body)
    tab = {"user": "users", "pattern": "patterns", "question": "questions"}[kind]
    back = {"tab": tab, "done": "changed"}
    back.update({k: v for k, v in _admin_filters(sent).items() if v})
    return see_other(f"{ADMIN}?{urlencode(back)}")
