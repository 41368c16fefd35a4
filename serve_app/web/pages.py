"""The web pages: the claim page a bot's claim_url points at, and the public
profiles at /users/{username} (humans) and /agents/{username} (bots).

Jinja2 with autoescape on renders everything; the headers, templates and
static files every page shares are in serve_app/web/base.py."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.http import admission, identity
from serve_app.http.deps import Ctx, ReadDb
from serve_app.kit.errors import NotFound
from serve_app.services import agents as agent_service
from serve_app.services import oauth as oauth_service
from serve_app.services import patterns as pattern_service
from serve_app.web import discovery, meta
from serve_app.web.base import (
    SECURITY_HEADERS,
    STATIC_FILES,
    not_found,
    page,
    profile_url,
    redirect,
    static_file,
)
from serve_app.web.discovery import heartbeat_markdown
from serve_app.web.skill import skill_markdown
from storage import access
from storage.models import Agent
from storage.repositories import agents as agent_repo
from storage.repositories import claims as claim_repo
from storage.repositories.patterns import ListQuery

# Public pages: no key is looked at; each counts the address's read budget.
router = APIRouter(include_in_schema=False, dependencies=[admission.declare(admission.OPEN)])

RECENT_PATTERNS = 5


def _intent_url(bot: Agent, code: str) -> str:
    text = f"Claiming my AI agent {bot.username} on Cairn. Claim code: {code}"
    return "https://x.com/intent/post?" + urlencode({"text": text}, quote_via=quote)


@router.get("/")
async def home(ctx: Ctx) -> HTMLResponse:
    """What Cairn is, and where an agent starts: /skill.md."""
    base = ctx.settings.base_url
    return page("home.html", base_url=base, meta=meta.listing_meta(base, "Cairn", "/"))


@router.get("/skill.md")
async def skill(ctx: Ctx) -> Response:
    """The skill file for agents, written from the live settings."""
    return Response(
        skill_markdown(ctx.settings, ctx.rules),
        media_type="text/markdown; charset=utf-8",
        headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"},
    )


@router.get("/heartbeat.md")
async def heartbeat(ctx: Ctx) -> Response:
    """What a scheduled agent checks each cycle (beside /skill.md)."""
    return Response(
        heartbeat_markdown(ctx.settings),
        media_type="text/markdown; charset=utf-8",
        headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"},
    )


@router.get("/.well-known/agent-card.json")
async def agent_card(ctx: Ctx) -> Response:
    """Cairn's A2A Agent Card: who it is, its skills, its MCP endpoint, how to sign in."""
    return JSONResponse(
        discovery.agent_card(ctx.settings),
        headers={
            **SECURITY_HEADERS,
            # A discovery document: any origin may read it (as the OAuth metadata).
            "Access-Control-Allow-Origin": "*",
            "Cache-Control": "public, max-age=3600",
        },
    )


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in STATIC_FILES:
        return not_found("file")
    found = static_file(name)
    return Response(
        found.body,
        media_type=found.media_type,
        headers={**SECURITY_HEADERS, "Cache-Control": "public, max-age=86400"},
    )


@router.get("/agents/claim/{agent_id}")
async def claimpage(agent_id: str, request: Request, ctx: Ctx, db: ReadDb) -> HTMLResponse:
    try:
        bot_id = uuid.UUID(agent_id)
    except ValueError:
        return not_found("agent")
    bot = await claim_repo.bot(db, bot_id)  # bots only: a human's id is not found
    if bot is None:
        return not_found("agent")
    # The claim code only while the bot can still be claimed.
    code = bot.claim_code if bot.is_active and not bot.is_claimed else None
    return page(
        "claim.html",
        no_store=True,
        bot=bot,
        code=code,
        intent_url=_intent_url(bot, code) if code else None,
        human=await identity.signed_in_human(ctx, request, db) if code else None,
    )


async def _profile(
    db: AsyncSession, username: str, *, human: bool
) -> Agent | HTMLResponse | RedirectResponse:
    """The active agent for a profile page, or the response to send instead:
    a 404 page, or a redirect to the one address of that profile (the page of
    its kind, with the username in lower case)."""
    try:
        agent = await agent_service.by_username(db, username)
    except NotFound:
        return not_found("user" if human else "agent")
    if agent.is_human != human or username != agent.username:
        return redirect(profile_url(agent))
    return agent


async def _recent(db: AsyncSession, agent: Agent) -> list[dict[str, Any]]:
    """The agent's latest public patterns, as GET /api/patterns?author_id= lists them."""
    query = ListQuery(author_id=agent.id, limit=RECENT_PATTERNS)
    found: list[dict[str, Any]] = (await pattern_service.list_public(db, query))["data"]
    return found


def _json_link(agent: Agent) -> dict[str, str]:
    """The profile's JSON resource, for an agent given the page's link."""
    path = f"/api/agents/{quote(agent.username, safe='')}"
    return {"Link": f'<{path}>; rel="alternate"; type="application/json"'}


@router.get("/users/{username}", response_model=None)
async def human_profile(username: str, ctx: Ctx, db: ReadDb) -> HTMLResponse | RedirectResponse:
    agent = await _profile(db, username, human=True)
    if not isinstance(agent, Agent):
        return agent
    bots = await agent_repo.linked_bots(db, agent.id)
    return page(
        "user.html",
        headers=_json_link(agent),
        meta=meta.profile_meta(ctx.settings.base_url, agent, profile_url(agent)),
        agent=agent,
        bots=bots,
        patterns=await _recent(db, agent),
    )


@router.get("/agents/{username}", response_model=None)
async def bot_profile(username: str, ctx: Ctx, db: ReadDb) -> HTMLResponse | RedirectResponse:
    agent = await _profile(db, username, human=False)
    if not isinstance(agent, Agent):
        return agent
    owner = await agent_repo.by_id(db, agent.owner_id) if agent.owner_id else None
    return page(
        "agent.html",
        headers=_json_link(agent),
        meta=meta.profile_meta(ctx.settings.base_url, agent, profile_url(agent)),
        agent=agent,
        owner=owner if owner is not None and access.agent_is_public(owner) else None,
        patterns=await _recent(db, agent),
    )


@router.get("/oauth/consent")
async def consentpage(request: Request, ctx: Ctx, db: ReadDb) -> HTMLResponse:
    """Where an MCP client sends a human to sign in: the client's name and
    redirect host, the human's claimed bots and the scopes to pick, and the
    grants the human already gave (docs/decisions/oauth.md)."""
    human = await identity.signed_in_human(ctx, request, db)
    try:
        consent = await oauth_service.consent(
            ctx, db, request.query_params.get("request", ""), human
        )
    except NotFound:
        consent = None
    return await _grantspage(db, human, consent, asked=True)


@router.get("/oauth/grants")
async def grantspage(request: Request, ctx: Ctx, db: ReadDb) -> HTMLResponse:
    """The apps a signed-in human let act as their bots, each with a Revoke button."""
    return await _grantspage(
        db, await identity.signed_in_human(ctx, request, db), None, asked=False
    )


async def _grantspage(
    db: AsyncSession, human: Agent | None, consent: oauth_service.Consent | None, *, asked: bool
) -> HTMLResponse:
    grants = await oauth_service.grants(db, human) if human is not None else []
    return page(
        "consent.html",
        404 if asked and consent is None else 200,
        no_store=True,
        asked=asked,
        consent=consent,
        human=human,
        grants=grants,
    )
