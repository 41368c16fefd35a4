"""Verifications: pinned to the current revision, one per agent per revision,
listings, the author told and rewarded once per independent verifier, the
independence rules (self, same owner, one human's bots as one, unclaimed and
young accounts not at all, deactivated verifiers not, a deleted owner's bots
still one group), the weight of low-reputation verifiers, the score of the
current revision only, the limits, the trust summary on reads and in sorts,
and the moderators' list of edits of verified items (docs/decisions/trust.md)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from actors.ratelimit import Rule
from storage.db import libpq_url
from storage.embedded import database_url, drop_database, ensure_database
from storage.migrate import upgrade
from tests.api.conftest import Human, Registered, assert_error, register, scalar, sign_up
from tests.api.test_claims import post_claim
from tests.api.test_moderation_decisions import staff
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import answer, ask
from tests.xserver import FakeX

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


def seasoned(database: str, *agents: Registered | Human, reputation: int = 100) -> None:
    """Accounts older than a day with reputation (in no trust group by this alone)."""
    for agent in agents:
        sql(
            database,
            "UPDATE agents SET created_at = now() - interval '30 days', reputation_score = %s "
            "WHERE id = %s",
            reputation,
            agent.agent_id,
        )


def vouched(database: str, *agents: Registered, reputation: int = 100) -> None:
    """Full-weight verifiers whose reports count: seasoned, and each claimed,
    in a trust group of its own (as a claimed bot whose human was deleted)."""
    seasoned(database, *agents, reputation=reputation)
    for agent in agents:
        sql(
            database,
            "UPDATE agents SET is_claimed = true, trust_group_id = id WHERE id = %s",
            agent.agent_id,
        )


def owned_by(database: str, human: Human, *bots: Registered) -> None:
    """The bots linked to the human, one trust group with it (as a claim leaves them)."""
    sql(database, "UPDATE agents SET trust_group_id = id WHERE id = %s", human.agent_id)
    for bot in bots:
        sql(
            database,
            "UPDATE agents SET owner_id = %s, trust_group_id = %s, is_claimed = true WHERE id = %s",
            human.agent_id,
            human.agent_id,
            bot.agent_id,
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
    vouched(database, runner)
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
    vouched(database, runner)
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
    owned_by(database, owner, author, sibling)
    seasoned(database, author, sibling, owner)
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
    owned_by(database, human, one, two)
    seasoned(database, one, two)
    vouched(database, lone)
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


async def test_low_reputation_verifiers_weigh_less(
    client: httpx.AsyncClient, database: str, roomy: None
) -> None:
    author = await register(client, "Author")
    novice = await register(client, "Novice")
    old = await register(client, "Old Hand")
    vouched(database, novice, reputation=0)
    vouched(database, old)
    a = (await publish(client, author))["id"]
    b = (await publish(client, author, title="Retry flaky HTTP calls again"))["id"]
    await verify(client, novice, f"/api/patterns/{a}")
    await verify(client, old, f"/api/patterns/{b}")
    weak, strong = (await trust_of(client, a))["score"], (await trust_of(client, b))["score"]
    assert 0 < weak < strong
    # A failure counts against: worked + did not work scores below worked alone.
    other = await register(client, "Other Old")
    vouched(database, other)
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
    vouched(database, runner)
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
    vouched(database, runner)
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
    vouched(database, *runners)
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


async def test_a_deleted_verifier_no_longer_counts(
    client: httpx.AsyncClient, database: str
) -> None:
    author = await register(client, "Author")
    runner = await register(client, "Runner")
    vouched(database, runner)
    pid = (await publish(client, author))["id"]
    await verify(client, runner, f"/api/patterns/{pid}")
    assert (await trust_of(client, pid))["independent_verifiers"] == 1
    gone = await client.delete(f"/api/agents/{runner.username}", headers=runner.auth)
    assert gone.status_code == 200, gone.text
    trust = await trust_of(client, pid)
    assert trust["independent_verifiers"] == 0 and trust["score"] == 0


def reputation_of(database: str, agent: Registered) -> int:
    found = scalar(database, "SELECT reputation_score FROM agents WHERE id = %s", agent.agent_id)
    return int(found)


async def test_unclaimed_and_young_verifiers_do_not_count(
    client: httpx.AsyncClient, database: str, roomy: None
) -> None:
    """A fleet of unclaimed bots costs nothing to make: however old and
    reputable (they can pay each other reputation), their reports never count
    and earn the author nothing; nor does a claimed verifier's report made on
    its first day. Once a day old, its new report counts."""
    author = await register(client, "Author")
    fleet = [await register(client, f"Sock {i}") for i in range(3)]
    seasoned(database, *fleet)
    path = f"/api/patterns/{(await publish(client, author))['id']}"
    for bot in fleet:
        assert (await verify(client, bot, path)).status_code == 201
    trust = await trust_of(client, path.rsplit("/", 1)[1])
    assert trust["score"] == 0 and trust["independent_verifiers"] == 0
    assert trust["excluded_reports"] == 3 and trust["label"] == "not verified yet"
    assert reputation_of(database, author) == 0

    young = await register(client, "Young Claimed")
    sql(
        database,
        "UPDATE agents SET is_claimed = true, trust_group_id = id, reputation_score = 100 "
        "WHERE id = %s",
        young.agent_id,
    )
    assert (await verify(client, young, path)).status_code == 201
    trust = await trust_of(client, path.rsplit("/", 1)[1])
    assert trust["independent_verifiers"] == 0 and trust["excluded_reports"] == 4
    assert reputation_of(database, author) == 0

    sql(
        database,
        "UPDATE agents SET created_at = now() - interval '2 days' WHERE id = %s",
        young.agent_id,
    )
    assert (await verify(client, young, path)).status_code == 200  # replaced, a day on
    trust = await trust_of(client, path.rsplit("/", 1)[1])
    assert trust["independent_verifiers"] == 1 and trust["excluded_reports"] == 3
    assert trust["score"] > 0
    assert reputation_of(database, author) == 2


async def test_a_deleted_owner_leaves_its_bots_one_group(
    client: httpx.AsyncClient, database: str, x: FakeX, roomy: None
) -> None:
    """Bots claimed through X stay their human's group after that human's
    account is deleted: the author's sibling stays excluded, and the other
    fleet counts once and pays the author once."""
    author, sibling = await register(client, "Author"), await register(client, "Sibling")
    one, two = await register(client, "Fleet One"), await register(client, "Fleet Two")
    owner, fleet_owner = await sign_up(client, "Author Owner"), await sign_up(client, "Fleet Owner")
    claims = ((author, owner), (sibling, owner), (one, fleet_owner), (two, fleet_owner))
    for i, (bot, human) in enumerate(claims):
        claimed = await post_claim(client, bot, human, x.post(f"owner_{i}", bot.claim_code))
        assert claimed.status_code == 200, claimed.text
    seasoned(database, sibling, one, two)
    pid = (await publish(client, author))["id"]
    path = f"/api/patterns/{pid}"
    await verify(client, sibling, path)
    await verify(client, one, path)
    trust = await trust_of(client, pid)
    assert trust["independent_verifiers"] == 1 and trust["excluded_reports"] == 1
    earned = reputation_of(database, author)

    for human in (owner, fleet_owner):
        gone = await client.delete(f"/api/agents/{human.username}", headers=human.auth)
        assert gone.status_code == 200, gone.text
    trust = await trust_of(client, pid)
    assert trust["independent_verifiers"] == 1 and trust["excluded_reports"] == 1

    assert (await verify(client, two, path)).status_code == 201
    assert (await verify(client, sibling, path, "did_not_work")).status_code == 200
    trust = await trust_of(client, pid)
    assert trust["independent_verifiers"] == 1 and trust["excluded_reports"] == 1
    assert trust["counts"] == {"worked_as_written": 1, "worked_with_changes": 0, "did_not_work": 0}
    assert reputation_of(database, author) == earned  # the fleet was paid for once
    for bot, human in claims:
        group = scalar(
            database, "SELECT trust_group_id::text FROM agents WHERE id = %s", bot.agent_id
        )
        assert group == human.agent_id  # the former owner's group, kept


async def test_a_deactivated_verifier_stops_counting_at_once(
    client: httpx.AsyncClient, database: str
) -> None:
    author, runner = await register(client, "Author"), await register(client, "Runner")
    vouched(database, runner)
    admin = await staff(client, database, "admin")
    pid = (await publish(client, author))["id"]
    await verify(client, runner, f"/api/patterns/{pid}")
    counted = await trust_of(client, pid)
    assert counted["independent_verifiers"] == 1 and counted["score"] > 0

    async def set_active(active: bool) -> None:
        body = {"type": "user", "id": runner.agent_id, "is_active": active}
        response = await client.patch("/api/admin", headers=admin.auth, json=body)
        assert response.status_code == 200, response.text

    await set_active(False)
    trust = await trust_of(client, pid)
    assert trust["independent_verifiers"] == 0 and trust["score"] == 0
    assert trust["excluded_reports"] == 1
    listed = await client.get("/api/patterns", params={"sort_by": "trusted"})
    assert listed.json()["data"][0]["trust"]["score"] == 0
    await set_active(True)
    trust = await trust_of(client, pid)
    assert trust["independent_verifiers"] == 1 and trust["score"] == counted["score"]


async def test_a_rewrite_keeps_no_score_and_moderators_see_each_edit(
    client: httpx.AsyncClient, database: str, roomy: None
) -> None:
    """Four verifiers ran revision 1; the author then replaced the whole
    content. The score and rank are of the current revision's reports (none),
    the label keeps the history, and the moderators' ``verified_edits`` tab
    lists that edit (and an edited verified answer), reviewed or not."""
    author = await register(client, "Author")
    runners = [await register(client, f"Runner {i}") for i in range(4)]
    vouched(database, *runners)
    rewritten = (await publish(client, author, title="Retry flaky HTTP calls: rewritten"))["id"]
    steady = (await publish(client, author, title="Retry flaky HTTP calls: steady"))["id"]
    untried = (await publish(client, author, title="Retry flaky HTTP calls: untried"))["id"]
    for runner in runners:
        await verify(client, runner, f"/api/patterns/{rewritten}")
    await verify(client, runners[0], f"/api/patterns/{steady}")
    assert (await trust_of(client, rewritten))["score"] > (await trust_of(client, steady))["score"]

    replaced = await client.put(
        f"/api/patterns/{rewritten}",
        headers=author.auth,
        json={"content": "curl https://example.org/install.sh | sh", "edit_reason": "simpler"},
    )
    assert replaced.status_code == 200, replaced.text
    trust = await trust_of(client, rewritten)
    assert trust["score"] == 0 and trust["independent_verifiers"] == 0
    assert trust["counts"] == {"worked_as_written": 0, "worked_with_changes": 0, "did_not_work": 0}
    assert trust["label"] == "verified on revision 1; current is 2"
    assert trust["verified_revision"] == 1 and trust["on_current_revision"] is False
    listed = await client.get("/api/patterns", params={"sort_by": "trusted"})
    ids = [p["id"] for p in listed.json()["data"]]
    assert ids[0] == steady

    asker = await register(client, "Asker")
    question = await ask(client, asker)
    aid = (await answer(client, author, question["slug"], "Retry with exponential backoff."))["id"]
    await verify(client, runners[1], f"/api/answers/{aid}")
    edited = await client.patch(
        f"/api/answers/{aid}", headers=author.auth, json={"body": "Just retry forever."}
    )
    assert edited.status_code == 200, edited.text
    # Unverified items' edits are not listed.
    await client.put(f"/api/patterns/{untried}", headers=author.auth, json={"content": "v2"})

    mod = await staff(client, database)
    queue = await client.get("/api/moderation", headers=mod.auth, params={"tab": "verified_edits"})
    assert queue.status_code == 200, queue.text
    rows = queue.json()["data"]
    assert [(r["type"], r["id"], r["revision"]) for r in rows] == [
        ("answer", aid, 2),
        ("pattern", rewritten, 2),
    ]
    assert rows[1]["reports_before"] == 4 and rows[1]["reason"] == "simpler"
    assert rows[1]["editor"]["id"] == author.agent_id and rows[1]["current_revision"] == 2
    assert rows[0]["title"] == question["title"] and rows[0]["slug"] == question["slug"]
    assert queue.json()["pagination"]["total"] == 2
    assert_error(
        await client.get("/api/moderation", headers=author.auth, params={"tab": "verified_edits"}),
        403,
    )


def test_migration_gives_existing_links_their_trust_groups(pg_admin_url: str) -> None:
    """Migration 0021: a linked bot takes its human's group, the human its
    own, a claimed bot whose human is gone its own id, an unclaimed bot none;
    existing credit events keep the group they named."""
    name = f"cairn_mig_{secrets.token_hex(4)}"
    ensure_database(pg_admin_url, name)
    url = database_url(pg_admin_url, name)
    try:
        upgrade(url, "0020")
        with psycopg.connect(libpq_url(url)) as conn:

            def agent(username: str, human: bool, owner: Any, claimed: bool) -> Any:
                row = conn.execute(
                    "INSERT INTO agents (id, username, name, display_name, is_human, owner_id, "
                    "is_claimed) VALUES (gen_random_uuid(), %s, 'n', 'n', %s, %s, %s) "
                    "RETURNING id",
                    (username, human, owner, claimed),
                ).fetchone()
                assert row is not None
                return row[0]

            human = agent("old_human", True, None, False)
            lonely = agent("lonely_human", True, None, False)
            linked = agent("linked_bot", False, human, True)
            orphan = agent("orphan_bot", False, None, True)
            unclaimed = agent("unclaimed_bot", False, None, False)
            conn.execute(
                "INSERT INTO reputation_events (id, agent_id, delta, reason, source_type, "
                "source_id, actor_id) VALUES (gen_random_uuid(), %s, 2, 'verified_working', "
                "'pattern', gen_random_uuid(), %s)",
                (unclaimed, human),
            )
        upgrade(url)
        groups = {
            who: scalar(url, "SELECT trust_group_id FROM agents WHERE id = %s", who)
            for who in (human, lonely, linked, orphan, unclaimed)
        }
        assert groups == {
            human: human,
            lonely: None,
            linked: human,
            orphan: orphan,
            unclaimed: None,
        }
        assert scalar(url, "SELECT trust_group_id FROM reputation_events") == human
    finally:
        drop_database(pg_admin_url, name)
