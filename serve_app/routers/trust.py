"""Trust by use: the revision and verification routes of an item, written
once for both kinds and added to the patterns' and the answers' routers
(``add_trust_routes``; docs/decisions/trust.md).

A pattern is named by its id or slug (``id_or_slug``), an answer by its id
(``answer_id``); the routes, their rules and their answers are otherwise the
same. Each route keeps the name its kind's router gave it, so the operation
ids stay ``patterns_list_revisions``, ``answers_verify_answer``, ….

No ``from __future__ import annotations`` here: the routes' parameters are
annotated with the kind's key type, a value of the factory, which FastAPI must
see as an object, not a string to resolve in this module.
"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Path, Response

from serve_app.http.contract import errors
from serve_app.http.deps import (
    CurrentCaller,
    Db,
    MaybeCaller,
    ReadDb,
    agent_limit,
    ip_limit,
)
from serve_app.schemas.common import DataOut, Limit, MessageDataOut, Page, PageOut
from serve_app.schemas.patterns import PatternDetailOut
from serve_app.schemas.questions import AnswerOut
from serve_app.schemas.verifications import (
    RedactIn,
    RevisionDiffOut,
    RevisionNumber,
    RevisionOut,
    RevisionSummaryOut,
    RollbackIn,
    VerificationFilter,
    VerificationIn,
    VerificationOut,
    VerificationPageOut,
)
from serve_app.services import revisions, verifications

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


@dataclass(frozen=True)
class Kind:
    """What differs between the kinds: the path key and its type, the item's
    model (a rollback answers with it), each route's name (its operation id
    after the tag) and description."""

    kind: Literal["pattern", "answer"]
    key: str
    key_type: type
    item_out: type
    names: dict[str, str]
    descriptions: dict[str, str]


PATTERN = Kind(
    kind="pattern",
    key="id_or_slug",
    key_type=str,
    item_out=PatternDetailOut,
    names={
        "history": "list_revisions",
        "one": "read_revision",
        "diff": "diff_revisions",
        "rollback": "rollback_pattern",
        "redact": "redact_revision",
        "verify": "verify_pattern",
        "verifications": "list_pattern_verifications",
    },
    descriptions={
        "history": "The pattern's revisions, newest first (1 is the pattern as created).",
        "one": "One revision of the pattern, with its full fields.",
        "diff": (
            "What changed from revision `number` to revision `other`: a unified diff per field."
        ),
        "rollback": "Put an earlier revision back (author or staff); this writes a new revision.",
        "redact": (
            "Replace fields of an old revision by a tombstone (author or staff; not the current "
            "one)."
        ),
        "verify": (
            "Report what happened when you ran the pattern's current revision (201 when\n"
            "new, 200 when it replaces your report on the same revision)."
        ),
        "verifications": (
            "Reports on the pattern, newest first, by `outcome` and `revision`; with its trust."
        ),
    },
)

ANSWER = Kind(
    kind="answer",
    key="answer_id",
    key_type=uuid.UUID,
    item_out=AnswerOut,
    names={
        "history": "list_answer_revisions",
        "one": "read_answer_revision",
        "diff": "diff_answer_revisions",
        "rollback": "rollback_answer",
        "redact": "redact_answer_revision",
        "verify": "verify_answer",
        "verifications": "list_answer_verifications",
    },
    descriptions={
        "history": "The answer's revisions, newest first (1 is the answer as posted).",
        "one": "One revision of the answer, with its body.",
        "diff": "What changed from revision `number` to revision `other`, as a unified diff.",
        "rollback": (
            "Put an earlier revision of the answer back (author or staff); writes a new revision."
        ),
        "redact": (
            "Replace fields of an old revision by a tombstone (author or staff; not the current "
            "one)."
        ),
        "verify": (
            "Report what happened when you used the answer's current revision (201 when\n"
            "new, 200 when it replaces your report on the same revision)."
        ),
        "verifications": (
            "Reports on the answer, newest first, by `outcome` and `revision`; with its trust."
        ),
    },
)


def add_trust_routes(router: APIRouter, k: Kind) -> None:
    """Add the revision and verification routes of one kind of item to its
    kind's router (which gives them its prefix and tag). Added, not included as
    a router of their own: the door (``contract.api_routes``) and the MCP tools
    name a route by the tag and name its router holds it with."""
    kind = k.kind
    item = "/{" + k.key + "}"
    key: Any = Annotated[k.key_type, Path(alias=k.key)]

    def keyed(endpoint: Endpoint) -> Endpoint:
        # Each route's ``ref`` is the kind's path key, typed as the kind says
        # (a UUID for an answer: a malformed one is a 400, as before); FastAPI
        # reads the annotation from the function.
        endpoint.__annotations__["ref"] = key
        return endpoint

    def route(op: str) -> dict[str, Any]:
        return {"name": k.names[op], "description": k.descriptions[op]}

    @router.get(
        f"{item}/revisions",
        response_model=PageOut[RevisionSummaryOut],
        responses=errors(404),
        **route("history"),
    )
    @keyed
    async def history(
        ref: Any, caller: MaybeCaller, db: ReadDb, page: Page = 1, limit: Limit = 20
    ) -> dict[str, Any]:
        agent = caller.agent if caller else None
        return await revisions.history(db, kind, ref, agent, page, limit)

    @router.get(
        f"{item}/revisions/{{number}}",
        response_model=DataOut[RevisionOut],
        responses=errors(404),
        **route("one"),
    )
    @keyed
    async def one(
        ref: Any, number: RevisionNumber, caller: MaybeCaller, db: ReadDb
    ) -> dict[str, Any]:
        return await revisions.one(db, kind, ref, caller.agent if caller else None, number)

    @router.get(
        f"{item}/revisions/{{number}}/diff/{{other}}",
        dependencies=[Depends(ip_limit("revision_diff"))],
        response_model=DataOut[RevisionDiffOut],
        responses=errors(404, 503),
        **route("diff"),
    )
    @keyed
    async def diff(
        ref: Any,
        number: RevisionNumber,
        other: RevisionNumber,
        caller: MaybeCaller,
        db: ReadDb,
    ) -> dict[str, Any]:
        agent = caller.agent if caller else None
        return await revisions.diff(db, kind, ref, agent, number, other)

    @router.post(
        f"{item}/revisions/{{number}}/rollback",
        response_model=MessageDataOut[k.item_out],  # type: ignore[name-defined]
        responses=errors(403, 404, 409, 422),
        **route("rollback"),
    )
    @keyed
    async def rollback(
        ref: Any, number: RevisionNumber, body: RollbackIn, caller: CurrentCaller, db: Db
    ) -> dict[str, Any]:
        return await revisions.rollback(db, kind, ref, caller.agent, number, body.reason)

    @router.post(
        f"{item}/revisions/{{number}}/redact",
        response_model=MessageDataOut[RevisionOut],
        responses=errors(400, 403, 404, 409),
        **route("redact"),
    )
    @keyed
    async def redact(
        ref: Any, number: RevisionNumber, body: RedactIn, caller: CurrentCaller, db: Db
    ) -> dict[str, Any]:
        return await revisions.redact(
            db, kind, ref, caller.agent, number, list(body.fields), body.reason
        )

    @router.post(
        f"{item}/verifications",
        dependencies=[Depends(agent_limit("verify")), Depends(ip_limit("verify_address"))],
        response_model=MessageDataOut[VerificationOut],
        responses={
            **errors(422),
            **errors(404),
            201: {"model": MessageDataOut[VerificationOut], "description": "A new report."},
        },
        **route("verify"),
    )
    @keyed
    async def verify(
        ref: Any, body: VerificationIn, response: Response, caller: CurrentCaller, db: Db
    ) -> dict[str, Any]:
        created, out = await verifications.verify(db, kind, ref, caller.agent, body)
        response.status_code = 201 if created else 200
        return out

    @router.get(
        f"{item}/verifications",
        response_model=VerificationPageOut,
        responses=errors(404),
        **route("verifications"),
    )
    @keyed
    async def list_verifications(
        ref: Any,
        caller: MaybeCaller,
        db: ReadDb,
        filters: Annotated[VerificationFilter, Depends()],
        page: Page = 1,
        limit: Limit = 20,
    ) -> dict[str, Any]:
        agent = caller.agent if caller else None
        return await verifications.list_for(
            db, kind, ref, agent, filters.outcome, filters.revision, page, limit
        )
