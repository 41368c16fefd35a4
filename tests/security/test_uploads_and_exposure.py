"""Issue 24, findings 6 and 7 (part): upload limits, quota, bounded decodes,
the key checked before the body is read; no exception text or SQL parameters
in /api/health, error responses or logs."""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy.engine import make_url

from actors.dispatch.dispatcher import Dispatcher
from serve_app.kit.multipart import FilePart
from serve_app.runtime.decodes import DecodeSlots
from serve_app.runtime.dispatch import LocalDispatch, dispatch_config
from serve_app.services import uploads as upload_service
from storage.db import async_url, libpq_url
from storage.models import Agent
from tests.api.conftest import OPERATOR, SECRET, StoreProbe, assert_error, register, scalar
from tests.api.test_uploads import image_bytes, on_disk, send

PNG = image_bytes("PNG")
BOUNDARY = "cairnsecurity"


def ctx_of(client: httpx.AsyncClient) -> Any:
    return client._transport.app.state.ctx  # type: ignore[attr-defined]


@pytest.fixture
def quota(client: httpx.AsyncClient) -> Iterator[Any]:
    """Set this test's upload quota: ``quota(bytes)``."""
    ctx = ctx_of(client)
    saved = ctx.settings

    def set_quota(size: int) -> None:
        ctx.settings = saved.model_copy(update={"upload_quota_bytes": size})

    yield set_quota
    ctx.settings = saved


class Body:
    """A streamed multipart body that records how much of it the app asked for."""

    def __init__(self, data: bytes, chunk: int = 4096) -> None:
        self.data = data
        self.chunk = chunk
        self.read = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        head = (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.png"'
            "\r\nContent-Type: image/png\r\n\r\n"
        ).encode()
        payload = head + self.data + f"\r\n--{BOUNDARY}--\r\n".encode()
        for i in range(0, len(payload), self.chunk):
            part = payload[i : i + self.chunk]
            self.read += len(part)
            yield part


async def stream(client: httpx.AsyncClient, auth: dict[str, str], body: Body) -> httpx.Response:
    return await client.post(
        "/api/upload",
        headers={**auth, "content-type": f"multipart/form-data; boundary={BOUNDARY}"},
        content=body.__aiter__(),
    )


# --- rate limit ----------------------------------------------------------------


async def test_uploads_have_their_own_rate_limit(
    client: httpx.AsyncClient, store: StoreProbe
) -> None:
    agent = await register(client, "Uploader")
    for i in range(30):
        response = await send(client, agent, PNG)
        assert response.status_code == 201, response.text
        assert response.headers["X-RateLimit-Limit"] == "30"
        assert response.headers["X-RateLimit-Remaining"] == str(29 - i)
    refused = await send(client, agent, PNG)
    assert_error(refused, 429, "rate_limited")
    assert int(refused.headers["Retry-After"]) > 3000
    assert len(on_disk(store)) == 30
    # Refused before the body: a rate-limited agent costs no upload bandwidth.
    body = Body(PNG)
    assert_error(await stream(client, agent.auth, body), 429, "rate_limited")
    assert body.read == 0


# --- quota ------------------------------------------------------------------------


async def test_per_agent_quota_is_413_and_deleting_makes_room(
    client: httpx.AsyncClient, database: str, store: StoreProbe, quota: Any
) -> None:
    quota(2 * len(PNG))  # exactly two images: then full
    agent = await register(client, "Hoarder")
    first = (await send(client, agent, PNG)).json()["data"]
    assert (await send(client, agent, PNG)).status_code == 201
    refused = await send(client, agent, PNG)
    assert_error(refused, 413, "upload_quota_exceeded")
    assert scalar(database, "SELECT count(*) FROM uploads") == 2
    # Full: refused before the body is read.
    body = Body(PNG)
    assert_error(await stream(client, agent.auth, body), 413, "upload_quota_exceeded")
    assert body.read == 0
    # Another agent has a quota of its own.
    other = await register(client, "Other")
    assert (await send(client, other, PNG)).status_code == 201
    # Deleting an image frees its bytes.
    deleted = await client.request(
        "DELETE", "/api/upload", headers=agent.auth, json={"path": first["path"]}
    )
    assert deleted.status_code == 200, deleted.text
    assert (await send(client, agent, PNG)).status_code == 201


async def test_parallel_uploads_cannot_overrun_the_quota(
    client: httpx.AsyncClient, database: str, store: StoreProbe, quota: Any
) -> None:
    quota(2 * len(PNG) + len(PNG) // 2)  # room for two, not three
    agent = await register(client, "Racer")
    responses = await asyncio.gather(*(send(client, agent, PNG) for _ in range(8)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [201, 201] + [413] * 6, [r.text for r in responses]
    used = scalar(
        database, "SELECT coalesce(sum(size), 0) FROM uploads WHERE agent_id = %s", agent.agent_id
    )
    assert used == 2 * len(PNG)
    assert len(on_disk(store)) == 2


# --- the key before the body ---------------------------------------------------------


@pytest.mark.parametrize("token", ["wrong", "cairn_" + "x" * 40, "altered"])
async def test_a_bad_key_is_refused_before_the_body_is_read(
    client: httpx.AsyncClient, database: str, store: StoreProbe, token: str
) -> None:
    agent = await register(client, "Victim")
    if token == "altered":  # the real key with its last character changed
        key = agent.auth["Authorization"].removeprefix("Bearer ")
        token = key[:-1] + ("a" if key[-1] != "a" else "b")
    body = Body(image_bytes("PNG", (600, 600)) + b"\x00" * (4 * 1024 * 1024))
    response = await stream(client, {"Authorization": f"Bearer {token}"}, body)
    assert_error(response, 401)
    assert body.read == 0  # not one byte of the 4 MiB body was asked for
    assert scalar(database, "SELECT count(*) FROM uploads") == 0
    # The same body with the real key is read and stored.
    good = Body(image_bytes("PNG", (600, 600)))
    assert (await stream(client, agent.auth, good)).status_code == 201
    assert good.read > 0


# --- bounded decodes ----------------------------------------------------------------


async def test_decodes_are_bounded_per_replica_with_a_503_when_busy(
    client: httpx.AsyncClient, database: str, store: StoreProbe
) -> None:
    ctx = ctx_of(client)
    saved = ctx.decodes
    slots = ctx.decodes = DecodeSlots(1, 0.3)
    release = threading.Event()
    try:
        # One decode in progress (a slow image) holds the only slot.
        busy = asyncio.get_running_loop().create_task(slots.run(lambda data: release.wait(10), b""))
        while slots.running == 0:
            await asyncio.sleep(0.01)
        agent = await register(client, "Patient")
        refused = await send(client, agent, PNG)
        assert_error(refused, 503, "uploads_busy")
        assert refused.headers["Retry-After"] == "1"
        assert scalar(database, "SELECT count(*) FROM uploads") == 0
        health = (await client.get("/api/health", headers=OPERATOR)).json()
        assert health["uploads"] == {"slots": 1, "running": 1, "refused": 1}
        release.set()
        await busy
        assert (await send(client, agent, PNG)).status_code == 201
    finally:
        release.set()
        ctx.decodes = saved
        slots.close()


# --- health and errors: no exception text, no SQL parameters ---------------------------


@pytest.fixture
def read_only_url(database: str) -> Iterator[str]:
    """The test database as a role that may only read (a real misconfiguration:
    the dispatcher's locking reads need write rights, its stats do not)."""
    role = f"cairn_ro_{secrets.token_hex(3)}"
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    url = make_url(async_url(database)).set(username=role, password=None)
    yield url.render_as_string(hide_password=False)
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")


async def test_health_shows_states_never_exception_text(
    client: httpx.AsyncClient, read_only_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = ctx_of(client)
    failing = Dispatcher(dispatch_config(ctx.settings, read_only_url, SECRET))
    saved = ctx.dispatch
    ctx.dispatch = LocalDispatch(failing)
    try:
        with caplog.at_level(logging.ERROR, logger="cairn.dispatch"):
            assert await failing.drain_safely() is False
        response = await client.get("/api/health", headers=OPERATOR)
    finally:
        ctx.dispatch = saved
        await failing.close()
    assert response.status_code == 200, response.text
    dispatch = response.json()["dispatch"]
    assert dispatch["errors"] == 1
    assert dispatch["state"] == "failing"
    assert isinstance(dispatch["last_error_at"], float)
    text = response.text.lower()
    for leak in ("permission denied", "privilege", "select ", "from fanout_jobs", "[sql", "hidden"):
        assert leak not in text, leak
    # The text is logged server-side, with the statement's values hidden.
    logged = caplog.text
    assert "permission denied" in logged
    assert "SQL parameters hidden" in logged
    assert "'pending'" not in logged


async def test_database_errors_carry_no_parameters(
    client: httpx.AsyncClient, store: StoreProbe
) -> None:
    """A real constraint violation in a service path: the raised (and logged)
    message names the statement but none of its values."""
    ctx = ctx_of(client)
    ghost = Agent(id=uuid.uuid4(), username="ghost_0000", display_name="Ghost")
    async with ctx.sessions() as db:
        with pytest.raises(Exception) as raised:
            await upload_service.create(ctx, db, ghost, FilePart(PNG, "a.png", "image/png"))
        await db.rollback()
    message = str(raised.value)
    assert "INSERT INTO uploads" in message  # it is the real error …
    assert "SQL parameters hidden" in message  # … without the values
    assert "image/png" not in message
    assert f"{ghost.id}/" not in message  # the stored path
