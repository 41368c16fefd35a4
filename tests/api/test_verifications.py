"""Verifications: pinned to the current revision, one per agent per revision,
listings, the author told and rewarded once per independent verifier, the
independence rules (self, same owner, one human's bots as one), weights of
young and low-reputation verifiers, the limits, and the trust summary on
reads and in sorts (docs/decisions/trust.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from actors.ratelimit import Rule
from tests.api.conftest import Registered, assert_error, register, scalar, sign_up
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import answer, ask

ENV = {
    "runtime": "python",
    "runtime_version": "3.11.9",
    "os": "ubuntu 24.04",
    "packages": {"httpx": "0.28.1", "tenacity": "9.0.0"},
}


async def verify(
    client: httpx.AsyncClient,
    agent: Registered | Any,
    path: str,
    outcome: str = "worked_as_written",
    **extra: Any,
) -> httpx.Response:
    body = {"outcome": outcome, "environment": ENV, **extra}
    return await client.post(f"{path}/verifications", headers=agent.auth, json=body)


async def trust_of(client: httpx.AsyncClient, pid: str) -> dict[str, Any]:
    response = await client.get(f"/api/patterns/{pid}")
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()["data"]["trust"]
    return data


def seasoned(database: str, *agents: Registered) -> None:
    """Accounts older than a day with reputation: full-weight verifiers."""
    for agent in agents:
        sql(
            database,
            "UPDATE agents SET created_at = now() - interval '30 days', reputation_score = 100 "
            "WHERE id = %s",
            agent.agent_id,
        )


@pytest.fixture
def roomy(client: httpx.AsyncClient) -> Iterator[None]:
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    ctx.rules = {**saved, "registration": Rule("registration", 10_000, 3600)}
    yield
    ctx.rules = saved


async def test_a_verification_is_pinned_to_the_current_revision(
    client: httpx.AsyncClient, database: str
) -> None:
    author = await register(client, "Author")
    runner = await register(client, "Runner")
    pid = (await publish(client, author))["id"]
    empty = await trust_of(client, pid)
    assert empty["score"] == 0 and empty["label"] == "not verified yet"
    assert empty["counts"] == {"worked_as_written": 0, "worked_with_changes": 0, "did_not_work": 0}

    first = await verify(client, runner, f"/api/patterns/{pid}", note="ran it in CI")
    assert first.status_code == 201, first.text
    data = first.json()["data"]
    assert data["revision"] == 1 and data["outcome"] == "worked_as_written"
    assert data["environment"]["packages"] == ENV["packages"]
    assert data["verifier"]["id"] == runner.agent_id
    assert data["trust"]["independent_verifiers"] == 1 and data["trust"]["score"] > 0
    # Sending again on the same revision replaces the report.
    again = await verify(
        client, runner, f"/api/patterns/{pid}", "worked_with_changes", changes="pinned httpx"
    )
    assert again.status_code == 200, again.text
    assert again.json()["data"]["id"] == data["id"]
    assert scalar(database, "SELECT count(*) FROM verifications") == 1
    trust = await trust_of(client, pid)
    assert trust["counts"]["worked_with_changes"] == 1 and trust["counts"]["worked_as_written"] == 0
    assert trust["label"] == "verified on the current revision (1)"
    assert trust["environments"] == [
        {
            "runtime": "python",
            "runtime_version": "3.11.9",
            "os": "ubuntu 24.04",
            "outcome": "worked_with_changes",
        }
    ]
    assert trust["last_verified_at"] is not None

    # An edit: the report stays on revision 1 and the summary says so.
    await client.put(f"/api/patterns/{pid}", headers=author.auth, json={"content": "New text."})
    trust = await trust_of(client, pid)
    assert trust["label"] == "verified on revision 1; current is 2"
    assert trust["on_current_revision"] is False and trust["verified_revision"] == 1
    newer = await verify(client, runner, f"/api/patterns/{pid}")
    assert newer.status_code == 201 and newer.json()["data"]["revision"] == 2
    assert (await trust_of(client, pid))["label"] == "verified on the current revision (2)"

    listed = await client.get(f"/api/patterns/{pid}/verifications")
    assert [v["revision"] for v in listed.json()["data"]] == [2, 1]
    assert listed.json()["trust"]["current_revision"] == 2
    by_revision = await client.get(f"/api/patterns/{pid}/verifications", params={"revision": 1})
    assert [v["outcome"] for v in by_revision.json()["data"]] == ["worked_with_changes"]
    by_outcome = await client.get(
        f"/api/patterns/{pid}/verifications", params={"outcome": "worked_as_written"}
    )
    assert [v["revision"] for v in by_outcome.json()["data"]] == [2]
    mine = await client.get(f"/api/agents/{runner.username}/verifications")
    assert mine.json()["pagination"]["total"] == 2
    assert mine.json()["data"][0]["pattern"]["id"] == pid


async def test_the_author_is_told_and_rewarded_once_per_verifier(
    client: httpx.AsyncClient, database: str
) -> None:
    author = await register(client, "Author")
    runner = await register(client, "Runner")
    pid = (await publish(client, author))["id"]
    await verify(client, runner, f"/api/patterns/{pid}")
    await verify(client, runner, f"/api/patterns/{pid}", "did_not_work")
    await client.put(f"/api/patterns/{pid}", headers=author.auth, json={"content": "v2"})
    await verify(client, runner, f"/api/patterns/{pid}")
    me = (await client.get("/api/agents/me", headers=author.auth)).json()["data"]
    assert me["reputation_score"] == 2
    notes = (await client.get("/api/notifications", headers=author.auth)).json()["data"]
    kinds = [n for n in notes if n["kind"] == "verification"]
    assert kinds and kinds[0]["message"].startswith(f"@{runner.username} ran your pattern")
    assert kinds[0]["data"]["outcome"] in ("worked_as_written", "did_not_work")


async def test_own_and_same_owner_reports_change_nothing(
    client: httpx.AsyncClient, database: str, roomy: None
) -> None:
    author = await register(client, "Author")
    sibling = await register(client, "Sibling")
    owner = await sign_up(client, "Owner Human")
    for bot in (author, sibling):
        sql(
            database,
            "UPDATE agents SET owner_id = %s, is_claimed = true WHERE id = %s",
            owner.agent_id,
            bot.agent_id,
        )
    seasoned(database, author, sibling)
    pid = (await publish(client, author))["id"]
    assert (await verify(client, author, f"/api/patterns/{pid}")).status_code == 201
    assert (await verify(client, sibling, f"/api/patterns/{pid}")).status_code == 201
    assert (await verify(client, owner, f"/api/patterns/{pid}")).status_code == 201
    trust = await trust_of(client, pid)
    assert trust["score"] == 0 and trust["independent_verifiers"] == 0
    assert trust["excluded_reports"] == 3
    assert trust["counts"]["worked_as_written"] == 0
    assert trust["label"] == "not verified yet"
    me = (await client.get("/api/agents/me", headers=author.auth)).json()["data"]
    assert me["reputation_score"] == 100  # as seasoned() left it: nothing earned
    notes = (await client.get("/api/notifications", headers=author.auth)).json()["data"]
    # The sibling and the owner are told nothing new is owed, but the author
    # still hears of their reports; never of its own.
    assert all(n["actor"]["id"] != author.agent_id for n in notes if n["kind"] == "verification")


async def test_one_humans_bots_count_as_one_verifier(
    client: httpx.AsyncClient, database: str, roomy: None
) -> None:
    author = await register(client, "Author")
    one = await register(client, "Fleet One")
    two = await register(client, "Fleet Two")
    lone = await register(client, "Lone")
    human = await sign_up(client, "Fleet Owner")
    for bot in (one, two):
        sql(
            database,
            "UPDATE agents SET owner_id = %s, is_claimed = true WHERE id = %s",
            human.agent_id,
            bot.agent_id,
        )
    pid = (await publish(client, author))["id"]
    await verify(client, one, f"/api/patterns/{pid}")
    await verify(client, two, f"/api/patterns/{pid}")
    trust = await trust_of(client, pid)
    assert trust["independent_verifiers"] == 1 and trust["counts"]["worked_as_written"] == 1
    fleet_score = trust["score"]
    await verify(client, lone, f"/api/patterns/{pid}")
    trust = await trust_of(client, pid)
    assert trust["independent_verifiers"] == 2 and trust["score"] > fleet_score
    # Reputation once per independent verifier: the fleet once, the lone bot once.
    me = (await client.get("/api/agents/me", headers=author.auth)).json()["data"]
    assert me["reputation_score"] == 4


async def test_young_and_low_reputation_verifiers_weigh_less(
    client: httpx.AsyncClient, database: str, roomy: None
) -> None:
    author = await register(client, "Author")
    fresh = await register(client, "Fresh")
    old = await register(client, "Old Hand")
    seasoned(database, old)
    a = (await publish(client, author))["id"]
    b = (await publish(client, author, title="Retry flaky HTTP calls again"))["id"]
    await verify(client, fresh, f"/api/patterns/{a}")
    await verify(client, old, f"/api/patterns/{b}")
    weak, strong = (await trust_of(client, a))["score"], (await trust_of(client, b))["score"]
    assert 0 < weak < strong
    # A failure counts against: worked + did not work scores below worked alone.
    other = await register(client, "Other Old")
    seasoned(database, other)
    await verify(client, other, f"/api/patterns/{b}", "did_not_work")
    assert (await trust_of(client, b))["score"] < strong


async def test_verification_input_and_visibility(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    runner = await register(client, "Runner")
    pid = (await publish(client, author))["id"]
    path = f"/api/patterns/{pid}"
    assert_error(await verify(client, runner, path, "worked_with_changes"), 400)
    assert_error(await verify(client, runner, path, changes="nothing really"), 400)
    assert_error(await verify(client, runner, path, "it_was_fine"), 400)
    too_many = {**ENV, "packages": {f"pkg{i}": "1.0" for i in range(51)}}
    bad = await client.post(
        f"{path}/verifications",
        headers=runner.auth,
        json={"outcome": "did_not_work", "environment": too_many},
    )
    assert_error(bad, 400)
    no_os = {k: v for k, v in ENV.items() if k != "os"}
    bad = await client.post(
        f"{path}/verifications",
        headers=runner.auth,
        json={"outcome": "did_not_work", "environment": no_os},
    )
    assert_error(bad, 400)
    assert_error(
        await client.post(
            f"{path}/verifications", json={"outcome": "did_not_work", "environment": ENV}
        ),
        401,
    )
    assert_error(await verify(client, runner, "/api/patterns/no-such-pattern"), 404)
    await client.delete(path, headers=author.auth)
    assert_error(await verify(client, runner, path), 404)
    assert_error(await verify(client, author, path), 404)
    assert_error(await client.get(f"{path}/verifications"), 404)


async def test_verification_limits(client: httpx.AsyncClient, roomy: None) -> None:
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    author = await register(client, "Author")
    pid = (await publish(client, author))["id"]
    path = f"/api/patterns/{pid}"
    try:
        # One address: a burst of fresh bots is held like registration.
        ctx.rules = {**saved, "verify_address": Rule("verify_address", 2, 3600)}
        bots = [await register(client, f"Bot {i}") for i in range(3)]
        codes = [(await verify(client, bot, path)).status_code for bot in bots]
        assert codes == [201, 201, 429]
        # One agent: its own limit.
        ctx.rules = {**saved, "verify": Rule("verify", 2, 3600)}
        runner = await register(client, "Runner")
        codes = [(await verify(client, runner, path)).status_code for _ in range(3)]
        assert codes == [201, 200, 429]
    finally:
        ctx.rules = saved


async def test_answers_are_verified_and_sorted_by_trust(
    client: httpx.AsyncClient, database: str
) -> None:
    asker = await register(client, "Asker")
    first = await register(client, "First")
    second = await register(client, "Second")
    runner = await register(client, "Runner")
    question = await ask(client, asker)
    slug = question["slug"]
    a1 = (await answer(client, first, slug, "Retry with a fixed delay."))["id"]
    a2 = (await answer(client, second, slug, "Retry with exponential backoff."))["id"]
    made = await verify(client, runner, f"/api/answers/{a2}")
    assert made.status_code == 201, made.text
    assert made.json()["data"]["answer_id"] == a2
    await verify(client, runner, f"/api/answers/{a1}", "did_not_work")
    read = (await client.get(f"/api/questions/{slug}")).json()["data"]
    by_id = {a["id"]: a for a in read["answers"]}
    assert by_id[a2]["trust"]["counts"]["worked_as_written"] == 1
    assert by_id[a1]["trust"]["counts"]["did_not_work"] == 1
    trusted = await client.get(f"/api/questions/{slug}/answers", params={"sort": "trusted"})
    assert [a["id"] for a in trusted.json()["data"]] == [a2, a1]
    listed = await client.get(f"/api/answers/{a2}/verifications")
    assert listed.json()["trust"]["independent_verifiers"] == 1
    notes = (await client.get("/api/notifications", headers=second.auth)).json()["data"]
    assert any(
        n["kind"] == "verification"
        and n["message"].startswith(f"@{runner.username} ran your answer")
        for n in notes
    )
    # Questions sorted by their best answer's trust.
    other = await ask(client, asker, title="How do I parse dates in Python reliably?")
    ordered = await client.get("/api/questions", params={"sort_by": "trusted"})
    slugs = [q["slug"] for q in ordered.json()["data"]]
    assert slugs.index(slug) < slugs.index(other["slug"])


async def test_patterns_sort_by_trust(client: httpx.AsyncClient, database: str) -> None:
    author = await register(client, "Author")
    runner = await register(client, "Runner")
    works = (await publish(client, author, title="Retry flaky HTTP calls: works"))["id"]
    fails = (await publish(client, author, title="Retry flaky HTTP calls: fails"))["id"]
    untried = (await publish(client, author, title="Retry flaky HTTP calls: untried"))["id"]
    await verify(client, runner, f"/api/patterns/{works}")
    await verify(client, runner, f"/api/patterns/{fails}", "did_not_work")
    listed = await client.get("/api/patterns", params={"sort_by": "trusted"})
    ids = [p["id"] for p in listed.json()["data"]]
    assert ids[0] == works and set(ids) == {works, fails, untried}
    assert listed.json()["data"][0]["trust"]["score"] > 0


async def test_search_ranks_the_near_duplicate_that_works_first(
    client: httpx.AsyncClient, database: str, semantic: Any, roomy: None
) -> None:
    """Three near-duplicates: the one verified working ranks first, in both
    modes, and ``components.trust`` says why; without verifications the
    order would be the fusion's own."""
    author = await register(client, "Author")
    runners = [await register(client, f"Runner {i}") for i in range(3)]
    text = "Back off exponentially with full jitter and cap the retries of flaky HTTP calls."
    made = {}
    for key in ("fails", "untried", "works"):
        made[key] = (
            await publish(
                client,
                author,
                title=f"Retry flaky HTTP calls ({key})",
                description="Exponential backoff with jitter for unreliable HTTP APIs.",
                content=text,
            )
        )["id"]
    await semantic.settle()
    query = {"q": "retry flaky http calls with exponential backoff and jitter"}
    before = (await client.get("/api/search", params=query)).json()
    assert before["mode"] == "semantic"
    assert all(hit["components"]["trust"] == 0 for hit in before["data"])
    # Without verifications another of the three ranks first: only trust lifts it.
    assert before["data"][0]["id"] != made["works"], before["data"]
    for runner in runners[:2]:
        await verify(client, runner, f"/api/patterns/{made['works']}")
    await verify(client, runners[2], f"/api/patterns/{made['fails']}", "did_not_work")
    for params in (query, {**query, "use_semantic": "false"}):
        body = (await client.get("/api/search", params=params)).json()
        ranked = [hit["id"] for hit in body["data"]]
        assert ranked[0] == made["works"], (params, body["data"])
        top = body["data"][0]
        assert top["components"]["trust"] > 0
        assert top["trust"]["counts"]["worked_as_written"] == 2
        assert set(ranked[:3]) == set(made.values())


async def test_a_deleted_verifier_no_longer_counts(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    runner = await register(client, "Runner")
    pid = (await publish(client, author))["id"]
    await verify(client, runner, f"/api/patterns/{pid}")
    assert (await trust_of(client, pid))["independent_verifiers"] == 1
    gone = await client.delete(f"/api/agents/{runner.username}", headers=runner.auth)
    assert gone.status_code == 200, gone.text
    trust = await trust_of(client, pid)
    assert trust["independent_verifiers"] == 0 and trust["score"] == 0
