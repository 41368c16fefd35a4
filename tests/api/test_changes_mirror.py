"""A mirror built only from the change feed equals what the public API shows
(issue 48): random operations with a fixed seed (publish, edit, archive,
ask, answer, accept, verify, comment, delete, moderation rejects and
approvals), the feed read as they go, then the mirror compared with the
anonymous API, id by id and field by field."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from actors.ratelimit import Rule
from actors.webhooks.compaction import Compactor
from tests.api.conftest import Registered, register, scalar
from tests.api.test_moderation_decisions import staff
from tests.api.test_verifications import ENV

Key = tuple[str, str]
# Enough operations that each kind happens (checked below), few enough to stay cheap.
OPS = 80

# The fields compared, by kind: the feed's item name, and the API's where it differs.
FIELDS: dict[str, dict[str, str]] = {
    "pattern": {
        "title": "title",
        "description": "description",
        "content": "content",
        "slug": "slug",
        "revision": "revision",
        "difficulty_level": "difficulty_level",
        "use_case_tags": "use_case_tags",
        "tech_stack": "tech_stack",
        "code_examples": "code_examples",
        "author_id": "author.id",
    },
    "question": {
        "title": "title",
        "body": "body",
        "slug": "slug",
        "status": "status",
        "tags": "tags",
        "author_id": "author.id",
    },
    "answer": {
        "body": "body",
        "question_id": "question_id",
        "is_accepted": "is_accepted",
        "revision": "revision",
        "author_id": "author.id",
    },
    "comment": {
        "content": "content",
        "is_deleted": "is_deleted",
        "parent_id": "parent_id",
        "pattern_id": "pattern_id",
        "answer_id": "answer_id",
        "author_id": "author.id",
    },
    "verification": {
        "outcome": "outcome",
        "revision": "revision",
        "note": "note",
        "environment": "environment",
        "pattern_id": "pattern_id",
        "answer_id": "answer_id",
        "agent_id": "verifier.id",
    },
}


def _get(value: Any, path: str) -> Any:
    for part in path.split("."):
        if value is None:
            return None
        value = value[part]
    return value


@pytest.fixture
def roomy(client: httpx.AsyncClient) -> Iterator[None]:
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    ctx.rules = {
        **saved,
        **{
            name: Rule(name, 100_000, 3600)
            for name in (
                "registration",
                "pattern_create",
                "question_create",
                "answer_create",
                "comment",
                "general",
                "anon_read",
            )
        },
    }
    yield
    ctx.rules = saved


class Mirror:
    """What a mirror holds: the latest public state of each subject, from the feed alone."""

    def __init__(self) -> None:
        self.items: dict[Key, dict[str, Any]] = {}
        self.cursor: str | None = None
        self.applied = 0

    async def catch_up(self, client: httpx.AsyncClient) -> None:
        while True:
            after = f"&after={self.cursor}" if self.cursor else ""
            response = await client.get(f"/api/changes?limit=7{after}")
            assert response.status_code == 200, response.text
            body = response.json()
            for change in body["data"]:
                key = (change["kind"], change["id"])
                if change["change"] == "tombstone":
                    assert change["item"] is None
                    self.items.pop(key, None)
                else:
                    self.items[key] = change["item"]
                self.applied += 1
            self.cursor = body["next_cursor"]
            if not body["has_more"]:
                return


async def _json(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


async def public_state(client: httpx.AsyncClient) -> dict[Key, dict[str, Any]]:
    """Everything the anonymous API shows, by (kind, id)."""
    shown: dict[Key, dict[str, Any]] = {}
    page = 1
    while True:
        body = await _json(await client.get(f"/api/patterns?limit=50&page={page}"))
        for item in body["data"]:
            detail = (await _json(await client.get(f"/api/patterns/{item['id']}")))["data"]
            shown[("pattern", item["id"])] = detail
        if not body["pagination"]["has_more"]:
            break
        page += 1
    page = 1
    while True:
        body = await _json(await client.get(f"/api/questions?limit=50&page={page}"))
        for item in body["data"]:
            detail = (await _json(await client.get(f"/api/questions/{item['slug']}")))["data"]
            assert not detail["answers_has_more"]
            shown[("question", item["id"])] = detail
            for a in detail["answers"]:
                shown[("answer", a["id"])] = a
        if not body["pagination"]["has_more"]:
            break
        page += 1

    def flatten(thread: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for c in thread:
            yield c
            yield from flatten(c.get("replies", []))

    for kind, item_id in [k for k in shown if k[0] in ("pattern", "answer")]:
        base = f"/api/{kind}s/{item_id}"
        thread = await _json(await client.get(f"{base}/comments"))
        for c in flatten(thread["data"]):
            shown[("comment", c["id"])] = c
        listed = await _json(await client.get(f"{base}/verifications?limit=50"))
        for v in listed["data"]:
            shown[("verification", v["id"])] = v
    return shown


async def test_a_mirror_built_from_the_feed_equals_the_public_api(
    client: httpx.AsyncClient, database: str, roomy: None
) -> None:
    rng = random.Random(4848)
    agents = [await register(client, f"Agent {i}") for i in range(4)]
    mod = await staff(client, database)
    patterns: list[tuple[str, Registered]] = []
    questions: list[tuple[str, str, Registered]] = []  # id, slug, author
    answers: list[tuple[str, Registered, Registered, str]] = []  # id, author, asker, question
    comments: list[tuple[str, Registered, str]] = []  # id, author, target
    targets: list[str] = []  # comment targets: /api/patterns/<id>, /api/answers/<id>
    mirror = Mirror()
    done: dict[str, int] = {}

    # How often each operation is picked; one whose material is missing (no
    # answer yet to accept) falls back to creating that material.
    weights = {
        "publish": 8,
        "edit_pattern": 8,
        "ask": 6,
        "edit_question": 4,
        "answer": 12,
        "edit_answer": 4,
        "accept": 6,
        "verify": 8,
        "comment": 14,
        "delete_comment": 5,
        "delete_answer": 4,
        "delete_question": 2,
        "moderate": 8,
    }

    def forget_answers(gone: list[tuple[str, Registered, Registered, str]]) -> None:
        for a in gone:
            answers.remove(a)
            targets.remove(f"/api/answers/{a[0]}")
            comments[:] = [c for c in comments if c[2] != f"/api/answers/{a[0]}"]

    async def act(i: int) -> None:
        who = rng.choice(agents)
        name = rng.choices(list(weights), list(weights.values()))[0]
        if not patterns:
            name = "publish"
        elif not questions:
            name = "ask"
        elif not answers and name in ("edit_answer", "accept", "delete_answer"):
            name = "answer"
        elif not comments and name == "delete_comment":
            name = "comment"
        if name == "publish":
            r = await client.post(
                "/api/patterns",
                headers=who.auth,
                json={
                    "title": f"Pattern {i} for retries",
                    "description": f"How to do thing {i} well.",
                    "content": f"Step one, step two, step {i}.",
                    "use_case_tags": rng.sample(["http", "retry", "cache", "io"], 2),
                    "code_examples": {
                        "python": {"language": "python", "code": f"retry({i})"},
                    },
                },
            )
            if r.status_code == 201:
                patterns.append((r.json()["data"]["id"], who))
                targets.append(f"/api/patterns/{r.json()['data']['id']}")
        elif name == "edit_pattern":
            pid, author = rng.choice(patterns)
            change = rng.choice(
                [
                    {"title": f"Edited title {i}"},
                    {"content": f"New text {i}."},
                    {"status": "archived"},
                    {"status": "published"},
                ]
            )
            r = await client.put(f"/api/patterns/{pid}", headers=author.auth, json=change)
        elif name == "ask":
            r = await client.post(
                "/api/questions",
                headers=who.auth,
                json={"title": f"How do I do thing {i}?", "body": f"Details of thing {i}, please."},
            )
            if r.status_code == 201:
                data = r.json()["data"]
                questions.append((data["id"], data["slug"], who))
        elif name == "edit_question":
            _, slug, author = rng.choice(questions)
            change = rng.choice(
                [
                    {"body": f"Better details for thing {i}, please."},
                    {"status": "closed"},
                    {"status": "open"},
                ]
            )
            r = await client.patch(f"/api/questions/{slug}", headers=author.auth, json=change)
        elif name == "answer":
            qid, slug, asker = rng.choice(questions)
            r = await client.post(
                f"/api/questions/{slug}/answers",
                headers=who.auth,
                json={"body": f"Answer {i}: back off."},
            )
            if r.status_code == 201:
                aid = r.json()["data"]["id"]
                answers.append((aid, who, asker, qid))
                targets.append(f"/api/answers/{aid}")
        elif name == "edit_answer":
            aid, author, _, _ = rng.choice(answers)
            r = await client.patch(
                f"/api/answers/{aid}", headers=author.auth, json={"body": f"Revised answer {i}."}
            )
        elif name == "accept":
            aid, _, asker, _ = rng.choice(answers)
            r = await client.post(f"/api/answers/{aid}/accept", headers=asker.auth)
        elif name == "verify":
            r = await client.post(
                f"{rng.choice(targets)}/verifications",
                headers=who.auth,
                json={
                    "outcome": rng.choice(["worked_as_written", "did_not_work"]),
                    "environment": ENV,
                    "note": f"run {i}",
                },
            )
        elif name == "comment":
            target = rng.choice(targets)
            body: dict[str, Any] = {"content": f"Comment {i} on this."}
            siblings = [c for c in comments if c[2] == target]
            if siblings and rng.random() < 0.5:
                body["parent_id"] = rng.choice(siblings)[0]
            r = await client.post(f"{target}/comments", headers=who.auth, json=body)
            if r.status_code == 201:
                comments.append((r.json()["data"]["id"], who, target))
        elif name == "delete_comment":
            gone = rng.choice(comments)
            r = await client.delete(f"/api/comments/{gone[0]}", headers=gone[1].auth)
            if r.status_code == 200:
                comments.remove(gone)
        elif name == "delete_answer":
            doomed = rng.choice(answers)
            r = await client.delete(f"/api/answers/{doomed[0]}", headers=doomed[1].auth)
            if r.status_code == 200:
                forget_answers([doomed])
        elif name == "delete_question":
            asked = rng.choice(questions)
            r = await client.delete(f"/api/questions/{asked[1]}", headers=asked[2].auth)
            if r.status_code == 200:
                questions.remove(asked)
                forget_answers([a for a in answers if a[3] == asked[0]])
        else:
            kind = rng.choice(["pattern", "question", "answer"] if answers else ["pattern"])
            pool = {"pattern": patterns, "question": questions, "answer": answers}[kind]
            action = rng.choice(["reject", "reject", "approve"])
            r = await client.patch(
                "/api/moderation",
                headers=mod.auth,
                json={f"{kind}_id": rng.choice(pool)[0], "action": action},
            )
            name = f"moderate_{action}"
        assert r.status_code < 500, r.text

        if r.status_code < 300:
            done[name] = done.get(name, 0) + 1

    # Compaction (docs/decisions/events.md) with nothing kept back by age:
    # once mid-run, behind the following mirror, and once at the end.
    sessions = client._transport.app.state.ctx.sessions  # type: ignore[attr-defined]
    compactor = Compactor(keep_s=0.0, step=25)
    deleted = 0
    for i in range(OPS):
        await act(i)
        if i % 20 == 0:
            await mirror.catch_up(client)  # the mirror follows as things happen
        if i == OPS // 2 + 10:  # the mirror last read at 40: it lags
            deleted += await compactor.run(sessions)
    await mirror.catch_up(client)
    deleted += await compactor.run(sessions)
    assert deleted > 0
    # What is left: one event per subject (every event is behind the horizon).
    assert scalar(database, "SELECT count(*) FROM events") == scalar(
        database, "SELECT count(DISTINCT (kind, subject_id)) FROM events"
    )
    # A mirror started after compaction, from the beginning, is the same.
    fresh = Mirror()
    await fresh.catch_up(client)

    # The run did each kind of thing (and the mirror saw tombstones).
    for name in [*weights, "moderate_reject"]:
        assert done.get(name, 0) >= 1 or name == "moderate", (name, done)

    truth = await public_state(client)
    assert set(mirror.items) == set(truth)
    assert fresh.items == mirror.items
    kinds = {kind for kind, _ in truth}
    assert kinds == set(FIELDS), kinds
    for (kind, item_id), shown in truth.items():
        mirrored = mirror.items[(kind, item_id)]
        for ours, theirs in FIELDS[kind].items():
            assert mirrored[ours] == _get(shown, theirs), (kind, item_id, ours)
