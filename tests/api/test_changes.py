"""The outbox and the change feed (docs/decisions/events.md): events are
written with their cause in commit order, the feed pages them with a signed
cursor and shows each subject as the public sees it now, tombstones carry
only ids, and a reader racing concurrent writers misses nothing."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from actors.webhooks.compaction import Compactor
from serve_app.services import events
from storage.db import make_engine, make_sessionmaker
from storage.repositories import events as event_repo
from tests.api.conftest import SECRET, Registered, assert_error, register, scalar
from tests.api.test_comments import comment
from tests.api.test_mcp import Connect, failed, mcp, ok  # noqa: F401 - fixture used by name
from tests.api.test_moderation_decisions import staff
from tests.api.test_patterns import publish
from tests.api.test_questions import answer, ask
from tests.api.test_verifications import verify
from tests.api.test_webhooks import settings  # noqa: F401 - fixture used by name


async def feed(client: httpx.AsyncClient, query: str = "") -> dict[str, Any]:
    response = await client.get(f"/api/changes{query}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def everything(client: httpx.AsyncClient, query: str = "", limit: int = 1000) -> list[Any]:
    """Every change, page by page, following next_cursor."""
    seen: list[Any] = []
    cursor = None
    while True:
        after = f"&after={cursor}" if cursor else ""
        body = await feed(client, f"?limit={limit}{after}{query}")
        seen.extend(body["data"])
        cursor = body["next_cursor"]
        if not body["has_more"]:
            return seen


async def test_public_changes_come_in_commit_order(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    helper = await register(client, "Helper")
    pattern = await publish(client, author)
    edited = await client.put(
        f"/api/patterns/{pattern['id']}", headers=author.auth, json={"title": "Retry it well"}
    )
    assert edited.status_code == 200, edited.text
    q = await ask(client, author)
    a = await answer(client, helper, q["slug"])
    accepted = await client.post(f"/api/answers/{a['id']}/accept", headers=author.auth)
    assert accepted.status_code == 200, accepted.text
    c = await comment(client, helper, pattern["id"])
    verified = await verify(client, helper, f"/api/patterns/{pattern['id']}")
    assert verified.status_code == 201, verified.text

    changes = (await feed(client))["data"]
    assert [(ch["type"], ch["id"]) for ch in changes] == [
        ("pattern.published", pattern["id"]),
        ("pattern.updated", pattern["id"]),
        ("question.created", q["id"]),
        ("answer.created", a["id"]),
        ("answer.accepted", a["id"]),
        ("comment.created", c["id"]),
        ("verification.created", verified.json()["data"]["id"]),
    ]
    # Each subject shows as it is now: the pattern at revision 2 in both.
    first, update = changes[0], changes[1]
    assert first["change"] == "created" and update["change"] == "updated"
    assert first["revision"] == update["revision"] == 2
    assert update["item"]["title"] == "Retry it well"
    assert changes[3]["item"]["is_accepted"] is True
    assert changes[3]["item"]["question_id"] == q["id"]
    assert changes[5]["item"]["pattern_id"] == pattern["id"]
    assert len({ch["event_id"] for ch in changes}) == len(changes)

    # Small pages, and a kinds filter, walk the same log.
    paged = await everything(client, limit=2)
    assert [ch["event_id"] for ch in paged] == [ch["event_id"] for ch in changes]
    answers = await everything(client, "&kinds=answer,question", limit=1)
    assert [ch["type"] for ch in answers] == [
        "question.created",
        "answer.created",
        "answer.accepted",
    ]
    # Nothing new: the last cursor gives an empty page and itself again.
    tail = await feed(client)
    again = await feed(client, f"?after={tail['next_cursor']}")
    assert again["data"] == [] and again["next_cursor"] == tail["next_cursor"]
    assert again["has_more"] is False


async def test_what_stops_being_public_reads_as_a_tombstone(
    client: httpx.AsyncClient, database: str
) -> None:
    author = await register(client, "Author")
    helper = await register(client, "Helper")
    pattern = await publish(client, author)
    c = await comment(client, helper, pattern["id"])
    q = await ask(client, author)
    a = await answer(client, helper, q["slug"])
    start = (await feed(client))["next_cursor"]

    archived = await client.put(
        f"/api/patterns/{pattern['id']}", headers=author.auth, json={"status": "archived"}
    )
    assert archived.status_code == 200, archived.text
    deleted = await client.delete(f"/api/questions/{q['slug']}", headers=author.auth)
    assert deleted.status_code == 200, deleted.text

    later = (await feed(client, f"?after={start}"))["data"]
    assert {(ch["type"], ch["id"]) for ch in later} == {
        ("pattern.removed", pattern["id"]),
        ("comment.removed", c["id"]),
        ("question.removed", q["id"]),
        ("answer.removed", a["id"]),
    }
    for ch in later:
        # Only ids: nothing of the text, the author, or why it went.
        assert ch["change"] == "tombstone" and ch["item"] is None and ch["revision"] is None
    # The older events about them read as tombstones too: nothing leaks.
    earlier = (await feed(client))["data"]
    assert all(ch["change"] == "tombstone" for ch in earlier)

    # Republished, the pattern and its comment come back.
    mark = (await feed(client))["next_cursor"]
    republished = await client.put(
        f"/api/patterns/{pattern['id']}", headers=author.auth, json={"status": "published"}
    )
    assert republished.status_code == 200, republished.text
    back = await feed(client, f"?after={mark}")
    assert {(ch["type"], ch["change"]) for ch in back["data"]} == {
        ("pattern.restored", "updated"),
        ("comment.restored", "updated"),
    }
    # A moderator's rejection is a tombstone as well; its rows say the same.
    mod = await staff(client, database)
    decided = await client.patch(
        "/api/moderation",
        headers=mod.auth,
        json={"pattern_id": pattern["id"], "action": "reject"},
    )
    assert decided.status_code == 200, decided.text
    assert (await feed(client))["data"][-1]["type"] == "comment.removed"
    assert (
        scalar(
            database,
            "SELECT count(*) FROM events WHERE type = 'pattern.removed' AND subject_id = %s",
            pattern["id"],
        )
        == 2
    )


async def test_account_deletion_leaves_tombstones(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    helper = await register(client, "Helper")
    pattern = await publish(client, author)
    own = await comment(client, helper, pattern["id"])
    q = await ask(client, helper)
    on_theirs = await answer(client, author, q["slug"])
    start = (await feed(client))["next_cursor"]
    gone = await client.delete(f"/api/agents/{author.username}", headers=author.auth)
    assert gone.status_code == 200, gone.text
    later = (await feed(client, f"?after={start}"))["data"]
    assert {(ch["kind"], ch["id"]) for ch in later} == {
        ("pattern", pattern["id"]),
        ("comment", own["id"]),
        ("answer", on_theirs["id"]),
    }
    assert all(ch["change"] == "tombstone" for ch in later)


def _cursor(position: int) -> str:
    return events.encode_cursor(SECRET, position)


def _forged() -> str:
    good = _cursor(1)
    return good[:-2] + ("AA" if good[-2:] != "AA" else "BB")


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("?after=not-a-cursor", "invalid_cursor"),
        ("?after=", None),  # blank: from the start
        ("?after=" + "A" * 65, "validation_error"),
        ("?after=FORGED", "invalid_cursor"),
        ("?after=FOREIGN", "invalid_cursor"),
        ("?after=AHEAD", "invalid_cursor"),
        ("?kinds=pattern,bogus", "unknown_kind"),
        ("?kinds=notification", "unknown_kind"),
        ("?limit=0", "validation_error"),
        ("?limit=1001", "validation_error"),
        ("?limit=ten", "validation_error"),
    ],
)
async def test_bad_cursors_kinds_and_limits_are_clear_400s(
    client: httpx.AsyncClient, query: str, error: str | None
) -> None:
    author = await register(client, "Author")
    await publish(client, author)
    query = (
        query.replace("FORGED", _forged())
        .replace("FOREIGN", events.encode_cursor(b"another deployment's secret", 1))
        .replace("AHEAD", _cursor(10**9))
    )
    response = await client.get(f"/api/changes{query}")
    if error is None:
        assert response.status_code == 200, response.text
        return
    body = assert_error(response, 400)
    assert body["error"] == error, body


async def test_positions_follow_commit_order_not_staging_order(
    client: httpx.AsyncClient,
) -> None:
    """The transaction that staged its event first but commits last gets the
    later position, so a reader that has already passed the early committer
    still finds it: the bug a sequence taken at insert would have."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    early, late = uuid.uuid4(), uuid.uuid4()
    async with ctx.sessions() as slow:
        event_repo.stage(slow, "pattern.updated", "pattern", late)
        await slow.execute(text("SELECT 1"))  # its transaction is open
        async with ctx.sessions() as quick:
            event_repo.stage(quick, "pattern.updated", "pattern", early)
            await quick.commit()
        async with ctx.read_sessions() as session:
            first = await events.changes(session, ctx.secret, None, None, 10)
        assert [ch["id"] for ch in first["data"]] == [str(early)]
        await slow.commit()
    async with ctx.read_sessions() as session:
        second = await events.changes(session, ctx.secret, first["next_cursor"], None, 10)
    assert [ch["id"] for ch in second["data"]] == [str(late)]


async def test_a_reader_paging_during_concurrent_writers_misses_nothing(
    client: httpx.AsyncClient,
) -> None:
    """Writers commit transactions of one to three events in an order other
    than the one they staged them in (each holds its transaction open a
    random while); a reader pages the feed all along with small pages. It
    sees every committed event exactly once, in increasing positions, and
    nothing of the transactions that rolled back. A position taken from a
    sequence at insert would let the reader pass a late committer's lower
    position and skip it for good."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    rng = random.Random(48)
    committed: set[uuid.UUID] = set()
    writing = True

    async def writer(n: int) -> None:
        for i in range(12):
            async with ctx.sessions() as session:
                ids = {
                    event_repo.stage(session, "pattern.updated", "pattern", uuid.uuid4())
                    for _ in range(rng.randint(1, 3))
                }
                # Hold the transaction open across others' commits.
                await session.execute(text("SELECT 1"))
                for _ in range(rng.randint(0, 3)):
                    await asyncio.sleep(0)
                if (n + i) % 5 == 4:
                    await session.rollback()
                    continue
                await session.commit()
            committed.update(ids)

    seen: list[tuple[int, uuid.UUID]] = []

    async def reader() -> None:
        cursor: str | None = None
        while True:
            done = not writing
            async with ctx.read_sessions() as session:
                page = await events.changes(session, ctx.secret, cursor, None, 3)
            for ch in page["data"]:
                seen.append((events.decode_cursor(ctx.secret, ch["cursor"]), ch["event_id"]))
            cursor = page["next_cursor"]
            if done and not page["has_more"]:
                return
            await asyncio.sleep(0)

    reading = asyncio.create_task(reader())
    await asyncio.gather(*(writer(n) for n in range(6)))
    writing = False
    await reading

    positions = [p for p, _ in seen]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert {uuid.UUID(e) for _, e in seen} == committed
    # No gaps: rolled-back transactions gave their positions back.
    assert positions == list(range(positions[0], positions[0] + len(positions)))


async def test_notifications_and_follows_are_recorded_but_never_in_the_feed(
    client: httpx.AsyncClient, database: str
) -> None:
    """What webhooks will need for the notifications an agent receives (here
    an answer to its question, and a new follower) is in the outbox, with the
    recipient; the feed, public content only, shows none of it."""
    asker = await register(client, "Asker")
    helper = await register(client, "Helper")
    q = await ask(client, asker)
    a = await answer(client, helper, q["slug"])
    followed = await client.post(f"/api/agents/{asker.username}/follow", headers=helper.auth)
    assert followed.status_code == 201, followed.text
    recorded = scalar(
        database,
        "SELECT json_agg(json_build_array(type, subject_id, actor_id, payload) ORDER BY position)"
        " FROM events WHERE kind IN ('notification', 'agent')",
    )
    assert recorded == [
        [
            "notification.created",
            q["id"],
            helper.agent_id,
            {
                "recipient_id": asker.agent_id,
                "notification": "question_answer",
                "target_type": "question",
            },
        ],
        ["agent.followed", asker.agent_id, helper.agent_id, {"follower_id": helper.agent_id}],
        [
            "notification.created",
            helper.agent_id,  # what it is about: the new follower
            helper.agent_id,
            {
                "recipient_id": asker.agent_id,
                "notification": "new_follower",
                "target_type": "agent",
            },
        ],
    ]
    assert [ch["id"] for ch in (await feed(client))["data"]] == [q["id"], a["id"]]


async def test_the_feed_through_mcp(
    client: httpx.AsyncClient,
    mcp: Connect,  # noqa: F811 - the fixture
) -> None:
    """``list_changes`` is the same feed as REST, for anonymous callers too."""
    author = await register(client, "Author")
    pattern = await publish(client, author)
    rest = await feed(client)
    async with mcp() as anon:
        page = ok(await anon.call_tool("list_changes", {"limit": 5}))
        assert page == rest
        assert page["data"][0]["id"] == pattern["id"]
        again = ok(await anon.call_tool("list_changes", {"after": page["next_cursor"]}))
        assert again["data"] == [] and again["next_cursor"] == page["next_cursor"]
        failed(await anon.call_tool("list_changes", {"after": _forged()}), "invalid_cursor")
        failed(await anon.call_tool("list_changes", {"kinds": "agent"}), "unknown_kind")


async def test_a_cursor_survives_a_restart(client: httpx.AsyncClient, database: str) -> None:
    """A cursor holds only a position and its MAC: a process started afresh
    (a new engine and new connections, the same secret) goes on from it."""
    author = await register(client, "Author")
    await publish(client, author)
    cursor = (await feed(client))["next_cursor"]
    later = await publish(client, author, title="Published after the cursor")
    engine = make_engine(database, pool_size=1)
    try:
        sessions = make_sessionmaker(engine.execution_options(isolation_level="AUTOCOMMIT"))
        async with sessions() as session:
            page = await events.changes(session, SECRET, cursor, None, 10)
    finally:
        await engine.dispose()
    assert [ch["id"] for ch in page["data"]] == [later["id"]]


async def edited_pattern(
    client: httpx.AsyncClient, name: str, edits: int
) -> tuple[Registered, dict[str, Any]]:
    """A new agent's pattern, published and then edited ``edits`` times: one
    subject with 1 + ``edits`` events, for compaction."""
    author = await register(client, name)
    pattern = await publish(client, author)
    for n in range(edits):
        edited = await client.put(
            f"/api/patterns/{pattern['id']}", headers=author.auth, json={"content": f"Step {n}."}
        )
        assert edited.status_code == 200, edited.text
    return author, pattern


async def test_compaction_spares_young_events_and_what_webhooks_have_not_matched(
    client: httpx.AsyncClient,
    database: str,
    settings: Any,  # noqa: F811 - the fixture
) -> None:
    """The horizon (docs/decisions/events.md, "Compaction"): events younger
    than the age kept, and past the webhook deliverer's cursor while any
    subscription exists, are never compacted."""
    sessions = client._transport.app.state.ctx.sessions  # type: ignore[attr-defined]
    author, pattern = await edited_pattern(client, "Compacted Author", 3)

    def count() -> int:
        return int(scalar(database, "SELECT count(*) FROM events"))

    before = count()
    assert before >= 4
    # A day kept back: these events are all younger.
    assert await Compactor(keep_s=86_400.0).run(sessions) == 0
    # A subscription whose deliverer has matched only up to the second event.
    settings(webhooks_allow_loopback=True)
    hook = await client.post(
        "/api/webhooks",
        json={"url": "http://127.0.0.1:9/hook", "events": ["answer.created"]},
        headers=author.auth,
    )
    assert hook.status_code == 201, hook.text
    second = scalar(database, "SELECT position FROM events ORDER BY position OFFSET 1 LIMIT 1")
    scalar(
        database,
        "INSERT INTO webhook_cursor (id, position) VALUES (1, %s) "
        "ON CONFLICT (id) DO UPDATE SET position = excluded.position RETURNING id",
        second,
    )
    # The age still binds beside the deliverer's cursor: nothing is a day old.
    assert await Compactor(keep_s=86_400.0).run(sessions) == 0
    assert count() == before
    # Up to the second event: only what the first two supersede between them.
    first_two = scalar(
        database,
        "SELECT 2 - count(DISTINCT (kind, subject_id)) FROM "
        "(SELECT kind, subject_id FROM events ORDER BY position LIMIT 2) e",
    )
    assert first_two == 1  # the publication, superseded by the first edit
    assert await Compactor(keep_s=0.0).run(sessions) == first_two
    scalar(database, "UPDATE webhook_cursor SET position = %s RETURNING id", 10**9)
    subjects = scalar(database, "SELECT count(DISTINCT (kind, subject_id)) FROM events")
    assert await Compactor(keep_s=0.0).run(sessions) == before - first_two - subjects
    assert scalar(database, "SELECT count(*) FROM events WHERE subject_id = %s", pattern["id"]) == 1
