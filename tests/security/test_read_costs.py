"""Issue 24, finding 5: public reads of bounded cost.

Views are counted without locking the row votes lock; ``?search=`` ranks a
bounded candidate set; paging stops at a maximum offset; threads are paged;
anonymous reads have a per-IP rate limit.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from serve_app.services import patterns as pattern_service
from serve_app.services import questions as question_service
from tests.api.conftest import Registered, register
from tests.api.test_patterns import publish
from tests.api.test_questions import ask

pytestmark = pytest.mark.usefixtures("roomy_registration")


def _ctx(client: httpx.AsyncClient) -> Any:
    return client._transport.app.state.ctx  # type: ignore[attr-defined]


async def _item(client: httpx.AsyncClient, kind: str, author: Registered) -> tuple[str, str]:
    """A new pattern or question: (the path of its detail read, its id)."""
    if kind == "pattern":
        made = await publish(client, author, title="Retry with jitter")
        return f"/api/patterns/{made['slug']}", made["id"]
    made = await ask(client, author)
    return f"/api/questions/{made['slug']}", made["id"]


# --- view counting does not contend with votes --------------------------------


@pytest.mark.parametrize("kind", ["pattern", "question"])
async def test_a_vote_commits_while_a_view_is_being_counted(
    client: httpx.AsyncClient, kind: str
) -> None:
    """A detail read whose transaction is still open (its view counted, not yet
    committed) must not hold up a vote on the same item: the vote answers
    at once, and both the view and the vote count."""
    author = await register(client, "Author")
    voter = await register(client, "Voter")
    path, _ = await _item(client, kind, author)
    slug = path.rsplit("/", 1)[1]
    ctx = _ctx(client)
    service = pattern_service if kind == "pattern" else question_service
    async with ctx.sessions() as held:
        # The app's own detail read, on its own connection, left uncommitted.
        await service.read(held, slug, None)
        try:
            vote = await asyncio.wait_for(
                client.post(f"{path}/vote", headers=voter.auth, json={"vote_type": "upvote"}),
                timeout=5,
            )
        except TimeoutError:
            pytest.fail("the vote waited on the open view transaction (row lock)")
        finally:
            await held.commit()
    assert vote.status_code == 200, vote.text
    detail = (await client.get(path)).json()["data"]
    assert (detail["view_count"], detail["vote_score"]) == (2, 1)


async def test_concurrent_views_and_votes_lose_nothing(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    voters = [await register(client, f"Voter {i}") for i in range(12)]
    path, pattern_id = await _item(client, "pattern", author)
    views = 60

    async def view() -> None:
        response = await client.get(path)
        assert response.status_code == 200, response.text

    async def vote(voter: Registered) -> None:
        response = await client.post(
            f"{path}/vote", headers=voter.auth, json={"vote_type": "upvote"}
        )
        assert response.status_code == 200, response.text

    jobs = [view() for _ in range(views)]
    for i, voter in enumerate(voters):
        jobs.insert(i * 5, vote(voter))
    await asyncio.gather(*jobs)
    detail = (await client.get(path)).json()["data"]
    assert detail["view_count"] == views + 1
    assert detail["vote_score"] == len(voters)
    listed = (await client.get("/api/patterns")).json()["data"]
    assert [(p["id"], p["view_count"]) for p in listed] == [(pattern_id, views + 1)]
