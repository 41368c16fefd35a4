"""Contract fuzzing: Schemathesis against the real app (in process, over real
Postgres), every operation of /openapi.json, authenticated as an agent.

Each operation gets the examples, coverage and fuzzing phases of Schemathesis
with a fixed seed (deterministic: the same cases on every run) and a bounded
number of examples, so the whole file stays within a few minutes on two cores.
Every answer must pass these checks:

- ``not_a_server_error``: no 5xx, ever;
- ``status_code_conformance``: the status is one the operation documents;
- ``response_schema_conformance``: the body matches the documented schema;
- ``content_type_conformance``: the media type is the documented one.

``CAIRN_FUZZ_CHECKS`` picks them: ``all`` (the four), ``basic`` (only
``not_a_server_error`` and ``content_type_conformance``, for while the
response models of issue 19 are not all in), or a comma-separated list of
check names. Unset, ``DEFAULT_CHECKS`` applies. ``CAIRN_FUZZ_EXAMPLES`` sets
the fuzzing examples per operation (default ``FUZZ_EXAMPLES``).

Who calls: every operation runs as one registered agent (its API key as
``Authorization: Bearer``), except
- human-only operations (those that depend on ``require_human``: claims,
  appeals, e-mail verification, logout), which send a signed-up human's
  session token instead;
- operations that destroy their caller (``POST``/``DELETE
  /api/agents/me/api-key``, ``DELETE /api/agents/{username}``, ``POST
  /api/humans/logout``), which run as a new agent (or human) registered for
  that one case, so the shared callers keep working. ``DELETE
  /api/agents/{username}`` targets that throwaway agent's own username when
  the case is generated from valid data, so the deletion really runs.

The rate limits of the fuzzing app are raised far out of reach (429 stays a
documented answer; tests/api checks the limits themselves).
"""

from __future__ import annotations

import inspect
import io
import os
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, cast

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from PIL import Image
from schemathesis.checks import not_a_server_error
from schemathesis.pytest import _test_builder
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.types import Receive, Scope, Send

from actors.ratelimit import Rule
from serve_app.app import create_app
from serve_app.http import contract
from tests.api.conftest import SECRET, make_settings
from tests.conftest import empty_tables
from tests.mailbox import running_smtp
from tests.xserver import FakeX

# Flip to "all" once every route has its response model (issue 19).
DEFAULT_CHECKS = "all"
FUZZ_EXAMPLES = 12
SEED = 19_2026

CHECKS_BY_NAME: dict[str, Callable[..., Any]] = {
    "not_a_server_error": not_a_server_error,
    "status_code_conformance": status_code_conformance,
    "response_schema_conformance": response_schema_conformance,
    "content_type_conformance": content_type_conformance,
}
CHECK_SETS = {
    "all": list(CHECKS_BY_NAME),
    "basic": ["not_a_server_error", "content_type_conformance"],
}


def selected_checks() -> list[Callable[..., Any]]:
    """The checks named by CAIRN_FUZZ_CHECKS (see the module docstring)."""
    setting = os.environ.get("CAIRN_FUZZ_CHECKS", "").strip() or DEFAULT_CHECKS
    names = CHECK_SETS.get(setting) or [n.strip() for n in setting.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECKS_BY_NAME]
    assert not unknown, f"CAIRN_FUZZ_CHECKS names unknown checks: {unknown}"
    return [CHECKS_BY_NAME[n] for n in names]


# Operations that end their caller: each case gets a caller of its own.
SELF_DESTRUCTIVE = {
    ("POST", "/api/agents/me/api-key"),
    ("DELETE", "/api/agents/me/api-key"),
    ("DELETE", "/api/agents/{username}"),
    ("POST", "/api/humans/logout"),
}

ROOMY = 10_000_000


@dataclass
class Caller:
    agent_id: str
    username: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


class OneLifespan:
    """The app with a lifespan that starts once and ends only when ``final``.

    Schemathesis starts an ASGI app's lifespan on its first request and ends it
    after every test (one test per operation here); Cairn's lifespan closes
    parts that do not reopen (the upload decode pool, the dispatcher). So the
    app's own lifespan runs once, on Schemathesis's event loop (where every
    request runs, and so the pool's connections live), and ends when the
    fixture sets ``final`` and stops it one last time."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.final = False
        self._running: AbstractAsyncContextManager[Any] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self._running is None:
                    self._running = self.app.router.lifespan_context(self.app)
                    await self._running.__aenter__()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.final and self._running is not None:
                    running, self._running = self._running, None
                    await running.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return


class Fuzzing:
    """The fuzzed app, its callers, and which operations need a human."""

    def __init__(self, app: FastAPI) -> None:
        self.app = OneLifespan(app)
        # Schemathesis types an ASGI app with plain dicts; Starlette's are mappings.
        self.asgi: Any = cast(Any, self.app)
        self.http = asgi.get_client(self.asgi)
        self.agent: Caller | None = None
        self.other: Caller | None = None
        self.human: Caller | None = None
        self.shared: dict[tuple[str, bool], str] = {}
        self.upload_path: str | None = None
        self._made = 0
        self.human_only = {
            (method, route.path)
            for route in contract.api_routes(app.routes)
            if "require_human"
            in {getattr(call, "__qualname__", "") for call in contract._calls(route.dependant)}
            for method in route.methods or ()
        }

    def register_agent(self) -> Caller:
        name = f"Fuzz {uuid.uuid4().hex[:10]}"
        response = self.http.post("/api/agents/register", json={"name": name})
        assert response.status_code == 201, response.text
        data = response.json()["data"]
        return Caller(data["agent_id"], data["username"], data["api_key"])

    def sign_up(self) -> Caller:
        tag = uuid.uuid4().hex[:10]
        response = self.http.post(
            "/api/humans/register",
            json={
                "name": f"Fuzz Human {tag}",
                "email": f"fuzz-{tag}@example.org",
                "password": "correct horse battery staple",
            },
        )
        assert response.status_code == 201, response.text
        data = response.json()["data"]
        return Caller(data["agent_id"], data["username"], data["session_token"])

    def caller_for(self, case: schemathesis.Case) -> Caller:
        """Who sends this case (see the module docstring)."""
        key = (case.method.upper(), case.path)
        human = key in self.human_only
        if key in SELF_DESTRUCTIVE:
            caller = self.sign_up() if human else self.register_agent()
            if key == ("DELETE", "/api/agents/{username}") and not _negative(case):
                case.path_parameters = {**(case.path_parameters or {}), "username": caller.username}
            return caller
        found = self.human if human else self.agent
        assert found is not None
        return found

    # --- real objects to aim at --------------------------------------------

    def _post(self, caller: Caller, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(path, json=body, headers=caller.headers)
        assert response.status_code == 201, f"{path}: {response.text}"
        data: dict[str, Any] = response.json()["data"]
        return data

    def _tag(self) -> str:
        self._made += 1
        return f"{self._made:04d}"

    def pattern(self, owner: Caller) -> str:
        tag = self._tag()
        data = self._post(
            owner,
            "/api/patterns",
            {
                "title": f"Retry flaky HTTP calls {tag}",
                "description": "Exponential backoff with jitter for unreliable APIs.",
                "content": "Wrap the call, back off exponentially, add jitter, cap the retries.",
            },
        )
        return str(data["id"])

    def question(self, owner: Caller) -> str:
        tag = self._tag()
        data = self._post(
            owner,
            "/api/questions",
            {
                "title": f"How do I retry a flaky HTTP call, case {tag}?",
                "body": "My agent calls an API that fails about one time in ten. What policy?",
            },
        )
        return str(data["slug"])

    def answer(self, owner: Caller, asker: Caller) -> str:
        slug = self.question(asker)
        body = {"body": "Use exponential backoff with jitter and a cap."}
        return str(self._post(owner, f"/api/questions/{slug}/answers", body)["id"])

    def comment(self, owner: Caller, author: Caller) -> str:
        pattern = self.pattern(author)
        body = {"content": "A useful remark about the retries."}
        return str(self._post(owner, f"/api/patterns/{pattern}/comments", body)["id"])

    def collection(self, owner: Caller) -> str:
        body = {"name": f"Reliability {self._tag()}", "description": "Patterns for retries."}
        return str(self._post(owner, "/api/collections", body)["id"])

    def webhook(self, owner: Caller) -> str:
        # Loopback, allowed by the fuzzing app's development setting: nothing
        # listens on port 9, so a ping fails at once and leaves the machine
        # never.
        body = {"url": "http://127.0.0.1:9/hook", "events": ["answer.created"]}
        return str(self._post(owner, "/api/webhooks", body)["id"])

    def make(self, kind: str, mine: bool) -> str:
        """A new object of ``kind``: the fuzzing agent's own, or another's."""
        assert self.agent is not None and self.other is not None
        owner, peer = (self.agent, self.other) if mine else (self.other, self.agent)
        if kind == "pattern":
            return self.pattern(owner)
        if kind == "question":
            return self.question(owner)
        if kind == "answer":
            return self.answer(owner, peer)
        if kind == "comment":
            return self.comment(owner, peer)
        if kind == "collection":
            return self.collection(owner)
        if kind == "webhook":
            return self.webhook(owner)
        if kind == "agent":
            return owner.username
        if kind == "agent_id":
            return owner.agent_id
        raise AssertionError(kind)

    def aim(self, case: schemathesis.Case) -> None:
        """Point a valid case's path at real objects two times in three (the
        fuzzing agent's own or another agent's), so the fuzzed bodies and
        queries reach the rules behind the lookup; a DELETE gets an object
        made for it alone, so the shared ones stay."""
        params = case.path_parameters or {}
        if not params or _negative(case) or (case.method.upper(), case.path) in SELF_DESTRUCTIVE:
            return
        choice = zlib.crc32(repr(sorted(params.items())).encode()) % 3
        if choice == 0:
            return
        mine = choice == 1
        fresh = case.method.upper() == "DELETE"
        aimed = dict(params)
        for name in params:
            kind = PATH_KINDS.get(name)
            if kind is None:
                continue
            if fresh and kind not in ("agent", "agent_id"):
                aimed[name] = self.make(kind, mine)
            else:
                aimed[name] = self.shared.setdefault((kind, mine), self.make(kind, mine))
        if case.path == "/uploads/{agent_id}/{name}" and self.upload_path:
            agent_id, _, name = self.upload_path.partition("/")
            aimed.update(agent_id=agent_id, name=name)
        case.path_parameters = aimed


# Path parameters by the kind of object they name.
PATH_KINDS = {
    "id_or_slug": "pattern",
    "slug": "question",
    "answer_id": "answer",
    "comment_id": "comment",
    "collection_id": "collection",
    "username": "agent",
    "agent_id": "agent_id",
    "webhook_id": "webhook",
}


def _negative(case: schemathesis.Case) -> bool:
    meta = case.meta
    return meta is not None and meta.generation.mode.is_negative


def _upload(fuzz: Fuzzing) -> str:
    """One real image of the fuzzing agent's (its path, ``<agent_id>/<name>``)."""
    assert fuzz.agent is not None
    image = io.BytesIO()
    Image.new("RGB", (4, 4), (200, 40, 40)).save(image, format="PNG")
    response = fuzz.http.post(
        "/api/upload",
        files={"file": ("dot.png", image.getvalue(), "image/png")},
        headers=fuzz.agent.headers,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["data"]["path"])


@pytest.fixture(scope="module")
def fuzzing(
    database: str, x_server: tuple[FakeX, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fuzzing]:
    """A fuzzing app of its own (its lifespan, pool and background work run on
    Schemathesis's ASGI event loop), roomy rate limits, and real outside
    services: the fake X (claims) and an SMTP server (e-mail verification)."""
    empty_tables(database)
    _, x_base = x_server
    with running_smtp() as (_, smtp_port):
        yield from _fuzzing(database, x_base, smtp_port, tmp_path_factory)


def _fuzzing(
    database: str, x_base: str, smtp_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fuzzing]:
    settings_ = make_settings(
        x_oembed_url=f"{x_base}/oembed",
        outbound_timeout_s=1.0,
        smtp_url=f"smtp://127.0.0.1:{smtp_port}",
        mail_from="Cairn <cairn@cairn.example>",
        state_dir=str(tmp_path_factory.mktemp("fuzz-state")),
        # A notification stream never ends by itself: here each one ends
        # after a second (its shortest life), so every stream case answers.
        stream_max_age_s=1.0,
        stream_heartbeat_s=0.5,
        # Webhooks to loopback (the fuzzer's URLs never leave the machine),
        # and room for the fresh subscriptions each DELETE case gets.
        webhooks_allow_loopback=True,
        webhooks_per_agent=100,
    )
    app = create_app(settings_, database_url=database, secret=SECRET, pool_size=5)
    ctx = app.state.ctx
    ctx.rules = {name: Rule(name, ROOMY, rule.window_s) for name, rule in ctx.rules.items()}
    fuzz = Fuzzing(app)
    with fuzz.http:
        fuzz.agent = fuzz.register_agent()
        fuzz.other = fuzz.register_agent()
        fuzz.human = fuzz.sign_up()
        fuzz.upload_path = _upload(fuzz)
        yield fuzz
    fuzz.app.final = True
    with asgi.get_client(fuzz.asgi):  # (re)started, if a test's end stopped it
        pass
    asgi.shutdown_lifespans()
    empty_tables(database)


def _published_contract() -> dict[str, Any]:
    """/openapi.json as the app publishes it (built without a database: the
    engine connects lazily, and the contract depends only on the routes)."""
    app = create_app(
        make_settings(), database_url="postgresql://contract@127.0.0.1:9/none", secret=SECRET
    )
    return app.openapi()


CONFIG = schemathesis.Config.from_dict(
    {
        "seed": SEED,
        "generation": {
            "mode": "all",
            "max-examples": int(os.environ.get("CAIRN_FUZZ_EXAMPLES", FUZZ_EXAMPLES)),
            "deterministic": True,
            "database": "none",
            "no-shrink": True,
        },
        "phases": {
            "examples": {"enabled": True},
            "coverage": {"enabled": True},
            "fuzzing": {"enabled": True},
            "stateful": {"enabled": False},
        },
    }
)
# Loaded when the module is collected (pytest makes one test per operation);
# the cases are sent to the fuzzing fixture's app, over the real database.
schema = schemathesis.openapi.from_dict(_published_contract(), config=CONFIG)

CHECKS = selected_checks()


@schema.parametrize()
@settings(
    deadline=None,
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)
def test_fuzz(case: schemathesis.Case, fuzzing: Fuzzing) -> None:
    """Every generated case answers without breaking the selected checks."""
    caller = fuzzing.caller_for(case)
    fuzzing.aim(case)
    case.call_and_validate(headers=caller.headers, checks=CHECKS, app=fuzzing.app)


# Schemathesis builds each operation's Hypothesis test, the cases of its
# coverage phase included, while it collects the module: about 25
# CPU-seconds for the whole contract, paid by every pytest-xdist worker
# (each collects every test), though one worker runs the file. Here the
# collected test is a stand-in with the same signature, and the real one is
# built, with the same arguments, when its test is set up (`_built`): the
# same cases, made only where they run.
_build_now = _test_builder.build_operation_test
_builders: dict[Any, Callable[[], Any]] = {}


def _build_later(**kwargs: Any) -> Any:
    if kwargs["test_func"] is not test_fuzz:
        return _build_now(**kwargs)

    def stand_in(**_: Any) -> None:
        raise AssertionError("built when its test is set up (_built)")

    given = inspect.signature(test_fuzz).parameters
    stand_in.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [p for name, p in given.items() if name != "case"]
    )
    stand_in.is_hypothesis_test = True  # type: ignore[attr-defined]
    _builders[stand_in] = lambda: _build_now(**kwargs)
    return stand_in


_test_builder.build_operation_test = _build_later


@pytest.fixture(autouse=True)
def _built(request: pytest.FixtureRequest) -> None:
    """The operation's real Hypothesis test in place of its stand-in, before
    Hypothesis's pytest plugin and Schemathesis's call it."""
    node = cast(Any, request.node)
    build = _builders.pop(node.obj, None)
    if build is not None:
        node.obj = build()
