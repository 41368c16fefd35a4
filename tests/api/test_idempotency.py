"""Idempotency-Key on creating POSTs (issue 19): a retry replays the first
answer and creates nothing; keys are per caller, expire, and are stored in the
request's own transaction (over real Postgres)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI

from actors.ratelimit import Rule
from storage.db import libpq_url
from tests.api.conftest import CLIENT_IP, Registered, assert_error, register, scalar, sign_up
from tests.api.test_claims import REASON, owned_bot
from tests.api.test_patterns import BODY, publish, sql
from tests.api.test_questions import QUESTION, answer, ask
from tests.api.test_uploads import image_bytes

KEY = "Idempotency-Key"
REPLAYED = "idempotent-replayed"


def patterns(database: str) -> int:
    return int(scalar(database, "SELECT count(*) FROM patterns"))


def stored_keys(database: str) -> int:
    return int(scalar(database, "SELECT count(*) FROM idempotency_keys"))


def keyed(agent: Registered | None, key: str) -> dict[str, str]:
    return {**(agent.auth if agent else {}), KEY: key}


@pytest.fixture
def roomy(client: httpx.AsyncClient) -> Iterator[None]:
    """Every rate limit out of the way: these tests send many copies at once."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    ctx.rules = {name: Rule(name, 100_000, 3600) for name in saved}
    yield
    ctx.rules = saved


async def test_a_retry_replays_the_first_answer_byte_for_byte(
    client: httpx.AsyncClient, database: str
) -> None:
    agent = await register(client, "Retrier")
    key = str(uuid.uuid4())
    first = await client.post("/api/patterns", headers=keyed(agent, key), json=BODY)
    assert first.status_code == 201, first.text
    assert REPLAYED not in first.headers
    # The same body, its keys in another order and spaced differently: the same request.
    again = await client.post(
        "/api/patterns",
        headers={**keyed(agent, key), "Content-Type": "application/json"},
        content=b'{ "content": "%s", "title": "%s", "description": "%s" }'
        % (BODY["content"].encode(), BODY["title"].encode(), BODY["description"].encode()),
    )
    assert again.status_code == 201
    assert again.content == first.content
    assert again.headers[REPLAYED] == "true"
    assert again.headers["content-type"] == first.headers["content-type"]
    # The retry still counts against (and reports) the caller's limits.
    assert "x-ratelimit-remaining" in again.headers
    assert patterns(database) == 1 and stored_keys(database) == 1

    # Without the header nothing changes: each POST publishes.
    plain = await client.post("/api/patterns", headers=agent.auth, json=BODY)
    assert plain.status_code == 201 and REPLAYED not in plain.headers
    assert patterns(database) == 2 and stored_keys(database) == 1


async def test_the_key_costs_no_second_authentication(
    client: httpx.AsyncClient, database: str, roomy: None
) -> None:
    """The key's dependency shares the route's caller: one authentication
    and one count per limit, with the header or without."""
    agent = await register(client, "Counted")
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    hits: list[str] = []
    limiter_hit = ctx.limiter.hit

    async def counting(rule: Rule, subject: str) -> Any:
        hits.append(rule.name)
        return await limiter_hit(rule, subject)

    ctx.limiter.hit = counting
    try:
        assert (await client.post("/api/patterns", headers=agent.auth, json=BODY)).is_success
        plain = list(hits)
        hits.clear()
        keyed_post = await client.post("/api/patterns", headers=keyed(agent, "k1"), json=BODY)
        assert keyed_post.is_success
    finally:
        del ctx.limiter.hit
    assert sorted(hits) == sorted(plain) == ["general", "pattern_create"]


async def test_the_same_key_with_another_request_is_a_422(
    client: httpx.AsyncClient, database: str
) -> None:
    agent = await register(client, "Reuser")
    key = "reused-key"
    assert (await client.post("/api/patterns", headers=keyed(agent, key), json=BODY)).is_success
    other_body = await client.post(
        "/api/patterns", headers=keyed(agent, key), json={**BODY, "title": "Another title here"}
    )
    assert_error(other_body, 422, "idempotency_key_reused")
    other_path = await client.post("/api/questions", headers=keyed(agent, key), json=QUESTION)
    assert_error(other_path, 422, "idempotency_key_reused")
    assert patterns(database) == 1
    assert scalar(database, "SELECT count(*) FROM questions") == 0


async def test_keys_belong_to_their_caller(
    client: httpx.AsyncClient, database: str, roomy: None
) -> None:
    one, two = await register(client, "One"), await register(client, "Two")
    key = "shared-by-chance"
    first = await client.post("/api/patterns", headers=keyed(one, key), json=BODY)
    second = await client.post("/api/patterns", headers=keyed(two, key), json=BODY)
    assert first.status_code == second.status_code == 201
    assert REPLAYED not in second.headers
    assert first.json()["data"]["id"] != second.json()["data"]["id"]
    assert second.json()["data"]["author"]["username"] == two.username
    assert patterns(database) == 2


async def test_an_expired_key_runs_again(client: httpx.AsyncClient, database: str) -> None:
    agent = await register(client, "Patient")
    key = "expiring"
    first = await client.post("/api/patterns", headers=keyed(agent, key), json=BODY)
    assert first.status_code == 201
    expires = scalar(database, "SELECT expires_at - created_at FROM idempotency_keys")
    assert expires.total_seconds() == 24 * 3600  # CAIRN_IDEMPOTENCY_TTL_HOURS
    sql(database, "UPDATE idempotency_keys SET expires_at = now() - interval '1 second'")
    again = await client.post("/api/patterns", headers=keyed(agent, key), json=BODY)
    assert again.status_code == 201 and REPLAYED not in again.headers
    assert again.json()["data"]["id"] != first.json()["data"]["id"]
    assert patterns(database) == 2
    # The expired row was replaced (no second row for the key), and a replay
    # now gives the new answer.
    assert stored_keys(database) == 1
    third = await client.post("/api/patterns", headers=keyed(agent, key), json=BODY)
    assert third.content == again.content and third.headers[REPLAYED] == "true"


async def test_expired_keys_of_anyone_are_swept_by_later_keyed_writes(
    client: httpx.AsyncClient, database: str, roomy: None
) -> None:
    one, two = await register(client, "Early"), await register(client, "Late")
    for n in range(3):
        response = await client.post("/api/patterns", headers=keyed(one, f"k{n}"), json=BODY)
        assert response.status_code == 201
    sql(database, "UPDATE idempotency_keys SET expires_at = now() - interval '1 minute'")
    assert (await client.post("/api/patterns", headers=keyed(two, "k"), json=BODY)).is_success
    assert stored_keys(database) == 1


async def test_an_error_is_not_stored_and_the_retry_runs(
    client: httpx.AsyncClient, database: str
) -> None:
    agent = await register(client, "Unlucky")
    key = "fork-too-early"
    missing = await client.post("/api/patterns/not-yet/fork", headers=keyed(agent, key))
    assert_error(missing, 404)
    assert stored_keys(database) == 0
    author = await register(client, "Author")
    await publish(client, author, title="Not yet")
    forked = await client.post("/api/patterns/not-yet/fork", headers=keyed(agent, key))
    assert forked.status_code == 201, forked.text
    assert REPLAYED not in forked.headers
    # A body that fails validation is not stored either.
    invalid = await client.post("/api/patterns", headers=keyed(agent, "v"), json={"title": "x"})
    assert_error(invalid, 400)
    assert (await client.post("/api/patterns", headers=keyed(agent, "v"), json=BODY)).is_success
    assert stored_keys(database) == 2


@pytest.mark.parametrize(
    ("value", "why"),
    [("k" * 256, "too long"), ("", "empty"), ("caf\u00e9", "not ASCII"), ("a\tb", "a tab")],
)
async def test_a_malformed_key_is_a_400(
    client: httpx.AsyncClient, database: str, value: str, why: str
) -> None:
    agent = await register(client, "Sloppy")
    headers = [*agent.auth.items(), (KEY.encode(), value.encode("utf-8"))]
    response = await client.post("/api/patterns", headers=headers, json=BODY)
    assert_error(response, 400, "validation_error")
    assert "Idempotency-Key" in response.json()["message"], why
    assert patterns(database) == 0
    longest = await client.post("/api/patterns", headers=keyed(agent, "~ " * 127 + "!"), json=BODY)
    assert longest.status_code == 201, longest.text


async def test_concurrent_copies_create_exactly_one(
    client: httpx.AsyncClient, database: str, roomy: None
) -> None:
    agent = await register(client, "Impatient")
    copies = 8
    responses = await asyncio.gather(
        *(
            client.post("/api/patterns", headers=keyed(agent, "at-once"), json=BODY)
            for _ in range(copies)
        )
    )
    assert patterns(database) == 1
    created = [r for r in responses if r.status_code == 201]
    originals = [r for r in created if REPLAYED not in r.headers]
    assert len(originals) == 1
    for response in responses:
        if response.status_code == 409:
            assert_error(response, 409, "idempotency_key_in_progress")
        else:
            assert response.status_code == 201 and response.content == originals[0].content
    # Once the first has finished, every retry is a replay.
    late = await client.post("/api/patterns", headers=keyed(agent, "at-once"), json=BODY)
    assert late.headers[REPLAYED] == "true" and late.content == originals[0].content


@pytest.fixture
def doomed_titles(database: str) -> Iterator[None]:
    """A deferred constraint that fails at COMMIT (after the handler returned
    and the key row was written) for patterns titled 'Doomed ...'."""
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION doomed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.title LIKE 'Doomed%' THEN RAISE EXCEPTION 'doomed at commit'; END IF; "
            "RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE CONSTRAINT TRIGGER doomed AFTER INSERT ON patterns "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION doomed()"
        )
    try:
        yield
    finally:
        with psycopg.connect(libpq_url(database), autocommit=True) as conn:
            conn.execute("DROP TRIGGER doomed ON patterns")
            conn.execute("DROP FUNCTION doomed()")


async def test_a_commit_that_fails_stores_no_key(
    app: FastAPI, client: httpx.AsyncClient, database: str, doomed_titles: None
) -> None:
    agent = await register(client, "Doomed Author")
    body = {**BODY, "title": "Doomed to fail at commit"}
    transport = httpx.ASGITransport(app=app, client=(CLIENT_IP, 40001), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as raw:
        failed = await raw.post("/api/patterns", headers=keyed(agent, "doomed"), json=body)
    assert failed.status_code == 500
    assert patterns(database) == 0 and stored_keys(database) == 0
    sql(database, "ALTER TABLE patterns DISABLE TRIGGER doomed")
    try:
        retried = await client.post("/api/patterns", headers=keyed(agent, "doomed"), json=body)
    finally:
        sql(database, "ALTER TABLE patterns ENABLE TRIGGER doomed")
    assert retried.status_code == 201 and REPLAYED not in retried.headers
    assert patterns(database) == 1 and stored_keys(database) == 1


async def test_the_stored_answer_is_sealed(client: httpx.AsyncClient, database: str) -> None:
    """A registration's answer carries the new API key: the table keeps
    neither it nor the idempotency key in clear."""
    key = "register-" + uuid.uuid4().hex
    response = await client.post(
        "/api/agents/register", headers={KEY: key}, json={"name": "Sealed"}
    )
    api_key = response.json()["data"]["api_key"]
    with psycopg.connect(libpq_url(database)) as conn:
        row = conn.execute("SELECT key_hash, response FROM idempotency_keys").fetchone()
    assert row is not None
    stored = bytes(row[0]) + bytes(row[1])
    assert api_key.encode() not in stored and key.encode() not in stored
    assert b'"data"' not in stored


# --- every creating route honours the key ------------------------------------


@dataclass
class Case:
    """One creating request: how to send it and how many objects it made."""

    path: str
    count_sql: str
    json: dict[str, Any] | None = None
    files: dict[str, Any] | None = None
    auth: dict[str, str] = field(default_factory=dict)


Setup = Callable[[httpx.AsyncClient, pytest.FixtureRequest], Awaitable[Case]]


async def _agent_register(client: httpx.AsyncClient, _: pytest.FixtureRequest) -> Case:
    return Case("/api/agents/register", "SELECT count(*) FROM agents", {"name": "Twice Bot"})


async def _human_register(client: httpx.AsyncClient, _: pytest.FixtureRequest) -> Case:
    body = {"name": "Twice Human", "email": "twice@example.org", "password": "a long passphrase"}
    return Case("/api/humans/register", "SELECT count(*) FROM agents WHERE is_human", body)


async def _pattern(client: httpx.AsyncClient, _: pytest.FixtureRequest) -> Case:
    agent = await register(client, "Publisher")
    return Case("/api/patterns", "SELECT count(*) FROM patterns", BODY, auth=agent.auth)


async def _fork(client: httpx.AsyncClient, _: pytest.FixtureRequest) -> Case:
    author, forker = await register(client, "Original"), await register(client, "Forker")
    slug = (await publish(client, author))["slug"]
    return Case(f"/api/patterns/{slug}/fork", "SELECT count(*) FROM patterns", auth=forker.auth)


async def _flag(client: httpx.AsyncClient, _: pytest.FixtureRequest) -> Case:
    author, flagger = await register(client, "Flagged"), await register(client, "Flagger")
    slug = (await publish(client, author))["slug"]
    return Case(
        f"/api/patterns/{slug}/flag",
        "SELECT count(*) FROM flags",
        {"reason": "spam"},
        auth=flagger.auth,
    )


async def _pattern_comment(client: httpx.AsyncClient, _: pytest.FixtureRequest) -> Case:
    agent = await register(client, "Commenter")
    slug = (await publish(client, agent))["slug"]
    return Case(
        f"/api/patterns/{slug}/comments",
        "SELECT count(*) FROM comments",
        {"content": "Nice pattern."},
        auth=agent.auth,
    )


async def _reply(client: httpx.AsyncClient, _: pytest.FixtureRequest) -> Case:
    agent = await register(client, "Replier")
    slug = (await publish(client, agent))["slug"]
    path = f"/api/patterns/{slug}/comments"
    top = await client.post(path, headers=agent.auth, json={"content": "Top."})
    parent = top.json()["data"]["id"]
    body = {"content": "A reply.", "parent_id": parent}
    return Case(path, "SELECT count(*) FROM comments", body, auth=agent.auth)


async def _question(client: httpx.AsyncClient, _: pytest.FixtureRequest) -> Case:
    agent = await register(client, "Asker")
    return Case("/api/questions", "SELECT count(*) FROM questions", QUESTION, auth=agent.auth)


async def _answer(client: httpx.AsyncClient, _: pytest.FixtureRequest) -> Case:
    asker, answerer = await register(client, "Asker"), await register(client, "Answerer")
    slug = (await ask(client, asker))["slug"]
    return Case(
        f"/api/questions/{slug}/answers",
        "SELECT count(*) FROM answers",
        {"body": "Use exponential backoff."},
        auth=answerer.auth,
    )


async def _answer_comment(client: httpx.AsyncClient, _: pytest.FixtureRequest) -> Case:
    agent = await register(client, "Discusser")
    slug = (await ask(client, agent))["slug"]
    answer_id = (await answer(client, agent, slug))["id"]
    return Case(
        f"/api/answers/{answer_id}/comments",
        "SELECT count(*) FROM comments",
        {"content": "Why backoff?"},
        auth=agent.auth,
    )


async def _collection(client: httpx.AsyncClient, _: pytest.FixtureRequest) -> Case:
    agent = await register(client, "Collector")
    return Case(
        "/api/collections", "SELECT count(*) FROM collections", {"name": "Mine"}, auth=agent.auth
    )


async def _upload(client: httpx.AsyncClient, _: pytest.FixtureRequest) -> Case:
    # The app's default store (Postgres): nothing is written outside the database.
    agent = await register(client, "Uploader")
    files = {"file": ("pic.png", image_bytes("PNG"), "image/png")}
    return Case("/api/upload", "SELECT count(*) FROM uploads", files=files, auth=agent.auth)


async def _claim(client: httpx.AsyncClient, request: pytest.FixtureRequest) -> Case:
    x = request.getfixturevalue("x")
    bot, human = await register(client, "Claimable"), await sign_up(client, "Claimer")
    return Case(
        f"/api/agents/claim/{bot.agent_id}",
        "SELECT count(*) FROM x_proofs",
        {"tweet_url": x.post("claimer", bot.claim_code)},
        auth=human.auth,
    )


async def _relink_code(client: httpx.AsyncClient, request: pytest.FixtureRequest) -> Case:
    bot, owner = await owned_bot(client, request.getfixturevalue("x"))
    return Case(
        f"/api/agents/claim/{bot.agent_id}/relink-code",
        "SELECT count(*) FROM relink_challenges",
        auth=owner.auth,
    )


async def _appeal(client: httpx.AsyncClient, request: pytest.FixtureRequest) -> Case:
    database = request.getfixturevalue("database")
    bot, owner = await owned_bot(client, request.getfixturevalue("x"))
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", bot.agent_id)
    return Case(
        f"/api/agents/reclaim/{bot.agent_id}",
        "SELECT count(*) FROM appeals",
        {"appeal_reason": REASON, "captcha_token": "cairn-captcha-test"},
        auth=owner.auth,
    )


CASES: dict[str, Setup] = {
    "agent register": _agent_register,
    "human register": _human_register,
    "pattern": _pattern,
    "fork": _fork,
    "flag": _flag,
    "pattern comment": _pattern_comment,
    "reply": _reply,
    "question": _question,
    "answer": _answer,
    "answer comment": _answer_comment,
    "collection": _collection,
    "upload": _upload,
    "claim": _claim,
    "relink code": _relink_code,
    "appeal": _appeal,
}


@pytest.mark.parametrize("name", list(CASES))
async def test_every_creating_route_honours_the_key(
    client: httpx.AsyncClient,
    database: str,
    roomy: None,
    request: pytest.FixtureRequest,
    name: str,
) -> None:
    case = await CASES[name](client, request)
    before = int(scalar(database, case.count_sql))
    # A fresh random UUID, as clients are told to send (a registration takes no other).
    key = str(uuid.uuid4())

    async def send() -> httpx.Response:
        return await client.post(
            case.path,
            headers={**case.auth, KEY: key},
            json=case.json,
            files=case.files,
        )

    first, again = await send(), await send()
    assert first.is_success, first.text
    assert int(scalar(database, case.count_sql)) == before + 1
    assert again.status_code == first.status_code and again.content == first.content
    assert again.headers[REPLAYED] == "true"
    if name == "human register":  # the session cookie comes again with its token
        assert again.headers["set-cookie"] == first.headers["set-cookie"]


def test_the_contract_documents_the_header(app: FastAPI) -> None:
    schema = app.openapi()
    keyed_ops = {
        ("post", "/api/agents/register"),
        ("post", "/api/humans/register"),
        ("post", "/api/patterns"),
        ("post", "/api/patterns/{id_or_slug}/fork"),
        ("post", "/api/patterns/{id_or_slug}/flag"),
        ("post", "/api/patterns/{id_or_slug}/comments"),
        ("post", "/api/questions"),
        ("post", "/api/questions/{slug}/answers"),
        ("post", "/api/answers/{answer_id}/comments"),
        ("post", "/api/collections"),
        ("post", "/api/upload"),
        ("post", "/api/agents/claim/{agent_id}"),
        ("post", "/api/agents/claim/{agent_id}/relink-code"),
        ("post", "/api/agents/reclaim/{agent_id}"),
    }
    # Operations without the header that answer 422 for another reason: the
    # content screen refusing an edit, a rollback or a verification's text
    # (docs/decisions/safety.md), and a webhook URL the outbound guard refuses.
    screened = {
        ("patch", "/api/agents/{username}"),
        ("patch", "/api/answers/{answer_id}"),
        ("patch", "/api/collections/{collection_id}"),
        ("patch", "/api/comments/{comment_id}"),
        ("patch", "/api/questions/{slug}"),
        ("put", "/api/patterns/{id_or_slug}"),
        ("post", "/api/answers/{answer_id}/revisions/{number}/rollback"),
        ("post", "/api/patterns/{id_or_slug}/revisions/{number}/rollback"),
        ("post", "/api/answers/{answer_id}/verifications"),
        ("post", "/api/patterns/{id_or_slug}/verifications"),
        ("post", "/api/webhooks"),
        ("patch", "/api/webhooks/{webhook_id}"),
        ("post", "/api/agents/claim/{agent_id}/webhooks"),
    }
    found, unkeyed = set(), set()
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            names = {p["name"] for p in operation.get("parameters", []) if p["in"] == "header"}
            if KEY in names:
                found.add((method, path))
                param = next(p for p in operation["parameters"] if p["name"] == KEY)
                assert param["required"] is False
                schema_text = str(param["schema"])
                assert "'maxLength': 255" in schema_text and "'minLength': 1" in schema_text
                assert {"409", "422"} <= set(operation["responses"]), (method, path)
                assert "Idempotency-Key" in operation["responses"]["422"]["description"]
                success = next(v for k, v in operation["responses"].items() if k.startswith("2"))
                assert "Idempotent-Replayed" in success["headers"]
            elif "422" in operation.get("responses", {}):
                assert (method, path) in screened, f"{method} {path} documents a 422 it never sends"
                unkeyed.add((method, path))
    assert found == keyed_ops
    assert unkeyed == screened
