"""The web pages: the claim page a bot's claim_url points at, and the public
profiles at /users/{username} (humans) and /agents/{username} (bots).

Jinja2 with autoescape on renders everything; the only script is
static/claim.js, and every response carries a strict Content-Security-Policy,
so no inline script or style can run even if some text slipped through."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.http import admission, identity
from serve_app.http.deps import Ctx, ReadDb
from serve_app.kit.errors import NotFound
from serve_app.kit.licensing import CONTENT_LICENSE, CONTENT_LICENSE_URL
from serve_app.services import agents as agent_service
from serve_app.services import oauth as oauth_service
from serve_app.web import discovery
from serve_app.web.discovery import heartbeat_markdown
from serve_app.web.skill import skill_markdown
from storage import access
from storage.models import Agent
from storage.repositories import agents as agent_repo
from storage.repositories import claims as claim_repo
from storage.repositories import patterns as pattern_repo

# Public pages: no key is looked at; each counts the address's read budget.
router = APIRouter(include_in_schema=False, dependencies=[admission.declare(admission.OPEN)])

HERE = Path(__file__).resolve().parent

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' https: data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

# The only files served under /static: name -> media type.
STATIC_FILES = {
    "cairn.css": "text/css; charset=utf-8",
    "claim.js": "text/javascript; charset=utf-8",
    "consent.js": "text/javascript; charset=utf-8",
}
RECENT_PATTERNS = 5


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    media_type: str
    version: str  # content hash: a changed file gets a new URL


@lru_cache(maxsize=len(STATIC_FILES))
def _static(name: str) -> StaticFile:
    body = (HERE / "static" / name).read_bytes()
    return StaticFile(body, STATIC_FILES[name], hashlib.sha256(body).hexdigest()[:12])


def static_url(name: str) -> str:
    return f"/static/{name}?v={_static(name).version}"


def profile_url(agent: Agent) -> str:
    """Where an agent's page is: /users/... for a human, /agents/... for a bot."""
    return f"/{'users' if agent.is_human else 'agents'}/{quote(agent.username, safe='')}"


def day(value: datetime | None) -> str:
    """A date for people: '21 November 2026'."""
    return f"{value.day} {value:%B %Y}" if value is not None else ""


def safe_image(url: str | None) -> str | None:
    """An avatar URL only when it is https: never javascript:, data: or
    relative, nor http (the pages' CSP loads images over https only, so an
    http avatar showed as a broken image; the placeholder shows instead)."""
    if url and url.lower().startswith("https://"):
        return url
    return None


@lru_cache(maxsize=1)
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every {{ }} is HTML-escaped, attributes included
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["static_url"] = static_url
    env.globals["profile_url"] = profile_url
    env.globals["content_license"] = CONTENT_LICENSE
    env.globals["content_license_url"] = CONTENT_LICENSE_URL
    env.filters["day"] = day
    env.filters["safe_image"] = safe_image
    return env


def _page(
    template: str, status_code: int = 200, *, no_store: bool = False, **values: Any
) -> HTMLResponse:
    html = _templates().get_template(template).render(**values)
    response = HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)
    # The claim page shows a claim code and who is signed in: never cached.
    response.headers["Cache-Control"] = "no-store" if no_store else "no-cache"
    return response


def _not_found(what: str) -> HTMLResponse:
    return _page("not_found.html", 404, what=what)


def _redirect(path: str) -> RedirectResponse:
    # A username is a bot's or a human's for good: the redirect is permanent.
    return RedirectResponse(path, status_code=308, headers=SECURITY_HEADERS)


def _intent_url(bot: Agent, code: str) -> str:
    text = f"Claiming my AI agent {bot.username} on Cairn. Claim code: {code}"
    return "https://x.com/intent/post?" + urlencode({"text": text}, quote_via=quote)


@router.get("/")
async def home(ctx: Ctx) -> HTMLResponse:
    """What Cairn is, and where an agent starts: /skill.md."""
    return _page("home.html", base_url=ctx.settings.base_url)


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
        return _not_found("file")
    found = _static(name)
    return Response(
        found.body,
        media_type=found.media_type,
        headers={**SECURITY_HEADERS, "Cache-Control": "public, max-age=86400"},
    )


@router.get("/agents/claim/{agent_id}")
async def claim_page(agent_id: str, request: Request, ctx: Ctx, db: ReadDb) -> HTMLResponse:
    try:
        bot_id = uuid.UUID(agent_id)
    except ValueError:
        return _not_found("agent")
    bot = await claim_repo.bot(db, bot_id)  # bots only: a human's id is not found
    if bot is None:
        return _not_found("agent")
    # The claim code only while the bot can still be claimed.
    code = bot.claim_code if bot.is_active and not bot.is_claimed else None
    return _page(
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
        return _not_found("user" if human else "agent")
    if agent.is_human != human or username != agent.username:
        return _redirect(profile_url(agent))
    return agent


@router.get("/users/{username}", response_model=None)
async def human_profile(username: str, db: ReadDb) -> HTMLResponse | RedirectResponse:
    agent = await _profile(db, username, human=True)
    if not isinstance(agent, Agent):
        return agent
    bots = await agent_repo.linked_bots(db, agent.id)
    return _page("user.html", agent=agent, bots=bots)


@router.get("/agents/{username}", response_model=None)
async def bot_profile(username: str, db: ReadDb) -> HTMLResponse | RedirectResponse:
    agent = await _profile(db, username, human=False)
    if not isinstance(agent, Agent):
        return agent
    owner = await agent_repo.by_id(db, agent.owner_id) if agent.owner_id else None
    recent, _ = await pattern_repo.list_public(
        db, pattern_repo.ListQuery(author_id=agent.id, limit=RECENT_PATTERNS)
    )
    return _page(
        "agent.html",
        agent=agent,
        owner=owner if owner is not None and access.agent_is_public(owner) else None,
        patterns=[p for p, _, _ in recent],
    )


@router.get("/oauth/consent")
async def consent_page(request: Request, ctx: Ctx, db: ReadDb) -> HTMLResponse:
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
    return await _grants_page(db, human, consent, asked=True)


@router.get("/oauth/grants")
async def grants_page(request: Request, ctx: Ctx, db: ReadDb) -> HTMLResponse:
    """The apps a signed-in human let act as their bots, each with a Revoke button."""
    return await _grants_page(
        db, await identity.signed_in_human(ctx, request, db), None, asked=False
    )


async def _grants_page(
    db: AsyncSession, human: Agent | None, consent: oauth_service.Consent | None, *, asked: bool
) -> HTMLResponse:
    grants = await oauth_service.grants(db, human) if human is not None else []
    return _page(
        "consent.html",
        404 if asked and consent is None else 200,
        no_store=True,
        asked=asked,
        consent=consent,
        human=human,
        grants=grants,
    )
