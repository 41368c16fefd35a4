"""Search through the real service: Api → VectorIndex → Embedder deployments,
the trigger-fed worker, the Api replicas' copies of the index, the rebuild of
the index when its replica restarts, and the fall-back to full text while
the Embedder is down."""

from __future__ import annotations

import asyncio
import secrets
import string
import time
from typing import Any

import httpx
import psutil

from tests.e2e.conftest import Service, actor_process, until_healthy
from tests.e2e.test_service import as_client, auth, publish, register

PATTERNS = [
    (
        "Schedule nightly jobs with cron",
        "A crontab line that runs a backup script at 02:30 every day.",
        "Edit with crontab -e, use absolute paths, redirect output to a log.",
    ),
    (
        "Refresh OAuth2 access tokens before they expire",
        "Keep a token cache and renew it ahead of its expiry time.",
        "Store expires_at, refresh when less than a minute remains, retry once on 401.",
    ),
    (
        "Stream a huge CSV file without loading it",
        "Read rows lazily with the csv module and a generator.",
        "Open the file, iterate csv.reader row by row, aggregate on the fly.",
    ),
]
MIDNIGHT = "trigger a task automatically around midnight"
CREDENTIALS = "renew login credentials early"


async def search(http: httpx.AsyncClient, q: str, **params: Any) -> dict[str, Any]:
    response = await http.get("/api/search", params={"q": q, **params}, headers=as_client())
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def first_hit(
    http: httpx.AsyncClient, q: str, expected: str | None, timeout: float = 90.0
) -> dict[str, Any]:
    """Poll until semantic search ranks ``expected`` first (None: finds nothing
    of it); the worker embeds asynchronously."""
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = await search(http, q)
        ids = [hit["id"] for hit in body["data"]]
        if body["mode"] == "semantic" and (
            (expected is None and not ids) or (ids and ids[0] == expected)
        ):
            return body
        await asyncio.sleep(0.3)
    raise AssertionError(f"search for {q!r} never ranked {expected} first: {body}")


def replicas(service: Service, deployment: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if f"ServeReplica:cairn:{deployment}" not in cmdline:
            continue
        try:
            if proc.environ().get("CAIRN_STATE_DIR") == str(service.state_dir):
                found.append(proc)
        except psutil.Error:
            continue
    return found


async def test_semantic_search_through_serve(http: httpx.AsyncClient, service: Service) -> None:
    author = await register(http, "Search Author")
    ids = await publish(http, author["api_key"], PATTERNS)

    # A paraphrase sharing no word with the pattern.
    body = await first_hit(http, MIDNIGHT, ids[0])
    assert body["data"][0]["score"] > 0 and body["data"][0]["type"] == "pattern"
    assert (await search(http, MIDNIGHT, use_semantic="false"))["mode"] == "fulltext"

    # An update shows up.
    updated = await http.put(
        f"/api/patterns/{ids[2]}",
        headers=auth(author["api_key"]),
        json={
            "title": "Make spaghetti carbonara",
            "description": "Eggs, pecorino, guanciale and pepper.",
            "content": "Boil the spaghetti, crisp the guanciale, toss off the heat with egg.",
        },
    )
    assert updated.status_code == 200, updated.text
    await first_hit(http, "cook a pasta dinner for guests", ids[2])

    # An archived pattern disappears.
    archived = await http.delete(f"/api/patterns/{ids[1]}", headers=auth(author["api_key"]))
    assert archived.status_code == 200, archived.text
    body = await search(http, CREDENTIALS)
    assert ids[1] not in [hit["id"] for hit in body["data"]]

    # The Api replicas search their own copies of the index
    # (serve_app/runtime/index_copies/vectors.py), which follow the worker's changes.
    replica: dict[str, Any] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        await search(http, MIDNIGHT)
        replica = ((await http.get("/api/health")).json()["search"] or {}).get("replica") or {}
        if replica.get("ready") and replica["counters"]["local"] > 0:
            break
        await asyncio.sleep(0.3)
    assert replica.get("ready") and replica["counters"]["local"] > 0, replica

    # The VectorIndex replica dies: the Api replicas' copies answer meanwhile
    # (a query asked before: its vector is in their caches); Serve starts
    # another, which rebuilds the index from Postgres and answers as before.
    before = await first_hit(http, MIDNIGHT, ids[0])
    started = (await http.get("/api/health")).json()["search"]["started"]
    index = actor_process(service, "ServeReplica:cairn:VectorIndex")
    index.kill()
    index.wait(timeout=30)
    assert (await search(http, MIDNIGHT))["data"] == before["data"]
    deadline = time.monotonic() + 120
    stats: dict[str, Any] = {}
    while time.monotonic() < deadline:
        stats = (await http.get("/api/health")).json()["search"] or {}
        if stats.get("ready") and stats["started"] > started:
            break
        await asyncio.sleep(0.5)
    assert stats.get("ready") and stats["started"] > started, stats
    assert stats["indexes"]["pattern"]["size"] >= len(PATTERNS) - 1
    after = await search(http, MIDNIGHT)
    assert after["mode"] == "semantic", after
    assert after["data"] == before["data"]


async def test_full_text_while_the_embedder_is_down(
    http: httpx.AsyncClient, service: Service
) -> None:
    author = await register(http, "Fallback Author")
    response = await http.post(
        "/api/patterns",
        headers=auth(author["api_key"]),
        json={
            "title": "Rotate nginx access logs with logrotate",
            "description": "Compress weekly and keep eight weeks of logrotate archives.",
            "content": "Put a stanza in /etc/logrotate.d/nginx and reload nginx in postrotate.",
        },
    )
    assert response.status_code == 201, response.text
    pattern = response.json()["data"]["id"]
    await first_hit(http, "logrotate nginx", pattern)
    # Every Api replica has its BM25 index by now (a fresh database); full
    # text and the fallback rank with it. It is the node's one index on disk
    # in the state folder, built once and searched by every replica
    # (serve_app/runtime/index_copies/lexical.py): one generation whichever
    # replica answers.
    health = (await http.get("/api/health")).json()
    assert health["lexical"]["ready"] is True, health
    generations = set()
    for _ in range(8):
        store = (await http.get("/api/health")).json()["lexical"]["store"]
        assert store["kind"] == "disk", store
        assert store["folder"].startswith(str(service.state_dir)), store
        generations.add(store["generation"])
    assert len(generations) == 1, generations

    # A query asked before is kept in each Api replica that asked it (HAProxy
    # alternates the idle replicas: a few sequential asks reach both) and in
    # the Embedder's cache, which answers every replica's misses.
    for _ in range(4):
        assert (await search(http, "logrotate nginx"))["mode"] == "semantic"
    cache = (await http.get("/api/health")).json()["search"]["embedder_query_cache"]
    assert cache["size"] >= 1 and cache["misses"] >= 1, cache
    embedders = replicas(service, "Embedder")
    assert embedders, "no Embedder replica found"
    for proc in embedders:
        proc.kill()
    # Until Serve has a new replica with the model loaded, a new query cannot be
    # embedded: search answers from full text, within the deadline.
    started = time.monotonic()
    body = await search(http, "nginx logrotate")
    assert time.monotonic() - started < 5
    assert body["mode"] == "fulltext"
    # The service is shared by the e2e modules: another's pattern may hold
    # these words too, but this one explains the query best.
    assert body["data"][0]["id"] == pattern, body["data"]
    parts = body["data"][0]["components"]
    assert parts["vector"] is None and parts["lexical"] == body["data"][0]["score"]
    # /api/health says so meanwhile: degraded, semantic search down because
    # of the Embedder (the VectorIndex itself is ready).
    deadline = time.monotonic() + 30
    health = (await http.get("/api/health")).json()
    while health["parts"]["search"]["state"] == "up" and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        health = (await http.get("/api/health")).json()
    assert health["status"] == "degraded", health["parts"]
    assert "embedder" in health["parts"]["search"]["reason"], health["parts"]
    assert health["search"]["ready"] is True and health["search"]["embedder"] == "unavailable"
    # A query asked before is still answered semantically: its vector is in the
    # Api replica's query cache (docs/decisions/deployment-and-operations.md,
    # "Serve path performance", "Queries").
    cached = await search(http, "logrotate nginx")
    assert cached["mode"] == "semantic" and cached["data"][0]["id"] == pattern
    # And recovers by itself (a query not asked before needs the Embedder).
    await first_hit(http, "nginx logrotate", pattern, timeout=120)
    await until_healthy(http, within_s=120)


def unique_word() -> str:
    """A word no other text holds (letters only: the BM25 tokenizer keeps it whole)."""
    return "zq" + "".join(secrets.choice(string.ascii_lowercase) for _ in range(10))


async def test_an_author_finds_their_own_write_at_once(http: httpx.AsyncClient) -> None:
    """Among 25 other patterns (more than a page), publish and then edit a
    pattern, each time searching at once for a word only it holds, with the
    author's key: 50 times through Serve's two Api replicas."""
    for a in range(5):
        filler = await register(http, f"Filler Author {a}")
        for n in range(5):
            made = await http.post(
                "/api/patterns",
                headers={**auth(filler["api_key"]), **as_client()},
                json={
                    "title": f"Filler pattern {a}-{n} about retries and queues",
                    "description": "Back off, retry, and keep the queue bounded.",
                    "content": f"Step {n}: retry with jitter; bound queue {a}; log each failure.",
                },
            )
            assert made.status_code == 201, made.text
    author = await register(http, "Fresh Author")
    key = author["api_key"]
    misses: list[tuple[int, str, int, list[str]]] = []
    pattern_id = ""
    for trial in range(50):
        word = unique_word()
        if trial == 0:
            written = await http.post(
                "/api/patterns",
                headers={**auth(key), **as_client()},
                json={
                    "title": "Read your own writes",
                    "description": "A pattern searched for the moment it is written.",
                    "content": f"Publish, then search at once for {word}.",
                },
            )
            assert written.status_code == 201, written.text
            pattern_id = written.json()["data"]["id"]
        else:
            written = await http.put(
                f"/api/patterns/{pattern_id}",
                headers={**auth(key), **as_client()},
                json={"content": f"Edit number {trial}, then search at once for {word}."},
            )
            assert written.status_code == 200, written.text
        found = await http.get(
            "/api/search", params={"q": word}, headers={**auth(key), **as_client()}
        )
        assert found.status_code == 200, found.text
        ids = [hit["id"] for hit in found.json()["data"]]
        if pattern_id not in ids:
            misses.append((trial, found.json()["mode"], len(ids), ids[:3]))
    assert misses == [], f"{len(misses)} of 50 searches missed the author's own write: {misses}"
