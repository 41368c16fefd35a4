"""The app over real Postgres, in process (no Ray): each test starts from empty tables."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI

import storage.models  # noqa: F401
from actors.ratelimit import Rule
from serve_app.app import create_app
from serve_app.runtime.ratelimit import LocalRateLimiter
from serve_app.runtime.semantic import LocalSearch
from serve_app.runtime.trending import LocalTrending
from serve_app.settings import Settings
from storage.db import libpq_url
from storage.files import FileStore, LocalFileStore, PostgresFileStore
from tests.conftest import empty_tables
from tests.contract_check import Contract
from tests.xserver import FakeX, running_x

SECRET = b"test-secret-key-for-hmac-0123456789"
CLIENT_IP = "203.0.113.7"
# CAIRN_OPERATOR_TOKEN of the test app: /api/health shows its details to it.
OPERATOR_TOKEN = "test-operator-token"
OPERATOR = {"X-Operator-Token": OPERATOR_TOKEN}


def make_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "public_base_url": "https://cairn.example",
        "state_dir": "/tmp/cairn-test-state",
        "operator_token": OPERATOR_TOKEN,
        # Every /api/health call looks at the parts (tests change them between
        # calls); the snapshot itself is tested in tests/security.
        "health_snapshot_s": 0,
        # Every key checked in Postgres: tests change rows straight in SQL and
        # call again at once, sooner than a change's notice reaches the key
        # cache. The cache has its own tests (test_key_cache.py); the e2e
        # suite runs the service with it on.
        "key_cache_ttl_s": 0,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="session")
async def app(database: str) -> AsyncIterator[FastAPI]:
    application = create_app(make_settings(), database_url=database, secret=SECRET, pool_size=5)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture(autouse=True)
async def _clean(database: str) -> AsyncIterator[None]:
    """Empty every table (but the seeded categories) after each API test.

    The emptying runs in a thread while the app's event loop (the session's)
    keeps running: a task the test left in the middle of a transaction can
    finish and release its locks, where a statement blocking the loop's own
    thread would wait for it forever. Should a lock still be held after a
    minute, the teardown fails and names the sessions holding it."""
    yield
    await asyncio.to_thread(empty_tables, database)


@pytest.fixture(scope="session")
def contract(app: FastAPI) -> Contract:
    return Contract(app.openapi())


def _checked_paths() -> tuple[str, ...] | None:
    """CAIRN_CONTRACT_CHECK: unset or "all", every /api route; "off", none;
    else the comma-separated path prefixes whose answers are checked."""
    setting = os.environ.get("CAIRN_CONTRACT_CHECK", "").strip() or "all"
    if setting == "off":
        return None
    if setting == "all":
        return ("/api/",)
    return tuple(p.strip() for p in setting.split(",") if p.strip())


@pytest.fixture
async def client(
    app: FastAPI, database: str, contract: Contract
) -> AsyncIterator[httpx.AsyncClient]:
    app.state.ctx.limiter = LocalRateLimiter()
    app.state.ctx.trending = LocalTrending(database)
    app.state.ctx.caches.clear()
    if app.state.ctx.lexical is not None:
        # This test's tables are empty (TRUNCATE logs no changes): a fresh
        # BM25 index.
        await app.state.ctx.lexical.build()
    transport = httpx.ASGITransport(app=app, client=(CLIENT_IP, 40000))
    checked = _checked_paths()

    async def conforms(response: httpx.Response) -> None:
        if checked is None or not response.request.url.path.startswith(checked):
            return
        await response.aread()
        problems = contract.problems(response)
        assert not problems, "the answer breaks /openapi.json:\n" + "\n".join(problems)

    async with httpx.AsyncClient(
        transport=transport, base_url="http://testserver", event_hooks={"response": [conforms]}
    ) as c:
        yield c
    # No dispatcher transaction may be open when the tables are emptied, and
    # no batch of keys' last use written after it.
    await app.state.ctx.dispatch.idle()
    await app.state.ctx.last_use.flush()


@dataclass
class StoreProbe:
    """The upload store a test runs with, and what it holds, looked at
    directly: the folder of the local-disk store, the rows of the Postgres one."""

    files: FileStore | PostgresFileStore
    database: str

    @property
    def kind(self) -> str:
        return "postgres" if isinstance(self.files, PostgresFileStore) else "local"

    @property
    def root(self) -> Path:
        assert isinstance(self.files, LocalFileStore), "only the local store has a folder"
        return self.files.root

    def paths(self) -> list[str]:
        """Every stored file's path, sorted."""
        if isinstance(self.files, LocalFileStore):
            if not self.files.root.exists():
                return []
            root = self.files.root
            return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        with psycopg.connect(libpq_url(self.database)) as conn:
            found = conn.execute(
                "SELECT DISTINCT u.path FROM upload_chunks c JOIN uploads u ON u.id = c.upload_id"
                " ORDER BY u.path"
            ).fetchall()
        return [row[0] for row in found]

    def read(self, path: str) -> bytes | None:
        """The stored bytes at ``path``, chunks joined in order."""
        if isinstance(self.files, LocalFileStore):
            return self.files.read(path)
        with psycopg.connect(libpq_url(self.database)) as conn:
            chunks = conn.execute(
                "SELECT c.seq, c.data FROM upload_chunks c JOIN uploads u ON u.id = c.upload_id"
                " WHERE u.path = %s ORDER BY c.seq",
                (path,),
            ).fetchall()
        if not chunks:
            return None
        assert [seq for seq, _ in chunks] == list(range(len(chunks))), "chunks out of sequence"
        return b"".join(bytes(data) for _, data in chunks)


@contextmanager
def using_store(
    client: httpx.AsyncClient, database: str, files: FileStore | PostgresFileStore
) -> Iterator[StoreProbe]:
    """Run the (session-wide) app with ``files`` as its upload store for a while."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.files
    ctx.files = files
    try:
        yield StoreProbe(files, database)
    finally:
        ctx.files = saved


@pytest.fixture(params=["postgres", "local"])
def store(
    client: httpx.AsyncClient, database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[StoreProbe]:
    """This test's upload store, each test once per kind: the Postgres store
    (the default), then the local disk in this test's own folder."""
    files = (
        PostgresFileStore() if request.param == "postgres" else LocalFileStore(tmp_path / "uploads")
    )
    with using_store(client, database, files) as probe:
        yield probe


@pytest.fixture
def local_store(client: httpx.AsyncClient, database: str, tmp_path: Path) -> Iterator[StoreProbe]:
    """The local-disk store alone, in this test's own folder."""
    with using_store(client, database, LocalFileStore(tmp_path / "uploads")) as probe:
        yield probe


@pytest.fixture(scope="session")
def x_server() -> Iterator[tuple[FakeX, str]]:
    with running_x() as running:
        yield running


@pytest.fixture
def x(client: httpx.AsyncClient, x_server: tuple[FakeX, str]) -> Iterator[FakeX]:
    """The fake X (a real local HTTP server), reset, with the app pointed at it
    (1 s timeout)."""
    fake, base = x_server
    fake.posts.clear()
    fake.requests.clear()
    fake.captcha_tokens.clear()
    fake.captcha_forms.clear()
    fake.mode = "normal"
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.settings
    ctx.settings = saved.model_copy(
        update={"x_oembed_url": f"{base}/oembed", "outbound_timeout_s": 1.0}
    )
    yield fake
    ctx.settings = saved


@dataclass
class Registered:
    agent_id: str
    username: str
    api_key: str
    claim_code: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


async def register(client: httpx.AsyncClient, name: str = "Test Agent", **extra: Any) -> Registered:
    response = await client.post("/api/agents/register", json={"name": name, **extra})
    assert response.status_code == 201, response.text
    data = response.json()["data"]
    return Registered(data["agent_id"], data["username"], data["api_key"], data["claim_code"])


def assert_error(response: httpx.Response, status: int, error: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body.get("error"), str) and body["error"], body
    assert isinstance(body.get("message"), str) and body["message"], body
    if error is not None:
        assert body["error"] == error, body
    return body


def scalar(database: str, statement: str, *params: Any) -> Any:
    with psycopg.connect(libpq_url(database)) as conn:
        row = conn.execute(statement, params).fetchone()
    return row[0] if row else None


@pytest.fixture
def roomy_registration(client: httpx.AsyncClient) -> Iterator[None]:
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    ctx.rules = {**saved, "registration": Rule("registration", 10_000, 3600)}
    yield
    ctx.rules = saved


@dataclass
class Human:
    agent_id: str
    username: str
    email: str
    password: str
    session_token: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.session_token}"}


async def sign_up(
    client: httpx.AsyncClient,
    name: str = "Grace Operator",
    email: str | None = None,
    password: str = "correct horse battery staple",
) -> Human:
    """A human signed up (and so signed in) through the API."""
    email = email or f"{name.split()[0].lower()}-{uuid.uuid4().hex[:8]}@example.org"
    response = await client.post(
        "/api/humans/register", json={"name": name, "email": email, "password": password}
    )
    assert response.status_code == 201, response.text
    data = response.json()["data"]
    return Human(data["agent_id"], data["username"], email, password, data["session_token"])


@pytest.fixture(scope="session")
def encoder() -> Any:
    """The real model (all-MiniLM-L6-v2 from its PyPI package), loaded once."""
    from embeddings.encoder import Encoder

    return Encoder(device="cpu")


@pytest.fixture
async def semantic(
    client: httpx.AsyncClient, database: str, encoder: Any
) -> AsyncIterator[LocalSearch]:
    """Semantic search in process: a fresh Indexer (real model, real FAISS)
    over this test's tables; ``await semantic.settle()`` embeds what is queued."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    local = LocalSearch(ctx.settings.indexer_config(database), encoder, ctx.sessions, ctx.engine)
    saved = ctx.search
    ctx.search = local
    yield local
    ctx.search = saved
