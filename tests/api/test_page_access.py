"""One set of rules (storage/access.py) for pages and REST alike: a row in
each state it can be in, read by each kind of viewer, shows on its page
exactly when the REST API answers that viewer 200 (docs/decisions/web.md).

The viewers are humans, so that the same account reads both doors: the page
through the session cookie, REST through the session token as a bearer key;
"another" is a signed-in stranger, and the moderator and admin are roles set
on accounts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.api.conftest import Human, sign_up
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import answer, ask
from tests.api.test_web_pages import cookie

# Each state a row can be in (the tables' CHECK constraints): the columns set.
# Five patterns: an author's hourly budget of pattern creations.
PATTERN_STATES = {
    "published": ("published", "approved"),
    "pending": ("published", "pending"),
    "flagged": ("published", "flagged"),
    "rejected": ("published", "rejected"),
    "archived": ("archived", "approved"),
}
QUESTION_STATES = {
    "open": ("open", "approved"),
    "pending": ("open", "pending"),
    "closed": ("closed", "approved"),
    "rejected": ("open", "rejected"),
    "deleted": ("deleted", "approved"),
}
ANSWER_STATES = ("approved", "pending", "flagged", "rejected")
VIEWERS = ("anonymous", "another", "author", "moderator", "admin")


@dataclass
class People:
    author: Human
    another: Human
    moderator: Human
    admin: Human

    def get(self, viewer: str) -> Human | None:
        return None if viewer == "anonymous" else getattr(self, viewer)


@pytest.fixture
async def people(client: httpx.AsyncClient, database: str) -> People:
    found = People(
        await sign_up(client, "Author Person"),
        await sign_up(client, "Another Person"),
        await sign_up(client, "Moderator Person"),
        await sign_up(client, "Admin Person"),
    )
    sql(database, "UPDATE agents SET role = 'moderator' WHERE id = %s", found.moderator.agent_id)
    sql(database, "UPDATE agents SET role = 'admin' WHERE id = %s", found.admin.agent_id)
    client.cookies.clear()
    return found


async def both(
    client: httpx.AsyncClient, who: Human | None, page: str, api: str
) -> tuple[httpx.Response, httpx.Response]:
    """The page and the REST answer of ``who``."""
    page_response = await client.get(page, headers=cookie(who.session_token) if who else {})
    api_response = await client.get(api, headers=who.auth if who else {})
    client.cookies.clear()
    return page_response, api_response


async def test_patterns_pages_and_rest_agree(
    client: httpx.AsyncClient, database: str, people: People
) -> None:
    rows: dict[str, dict[str, Any]] = {}
    for state, (status, moderation) in PATTERN_STATES.items():
        made = await publish(client, people.author, title=f"Pattern that is {state}")
        sql(
            database,
            "UPDATE patterns SET status = %s, moderation_status = %s WHERE id = %s",
            status,
            moderation,
            made["id"],
        )
        rows[state] = made
    client.cookies.clear()

    mismatches = []
    for state, made in rows.items():
        slug = made["slug"]
        for viewer in VIEWERS:
            who = people.get(viewer)
            for page, api in (
                (f"/patterns/{slug}", f"/api/patterns/{slug}"),
                (f"/patterns/{slug}/revisions", f"/api/patterns/{slug}/revisions"),
                (f"/patterns/{slug}/revisions/1", f"/api/patterns/{slug}/revisions/1"),
            ):
                page_response, api_response = await both(client, who, page, api)
                assert page_response.status_code in (200, 404), page_response.text
                assert api_response.status_code in (200, 404), api_response.text
                shown = page_response.status_code == 200 and made["title"] in page_response.text
                if shown != (api_response.status_code == 200):
                    mismatches.append((state, viewer, page, shown, api_response.status_code))
    assert mismatches == []
    # The matrix is not vacuous: the public row shows to all, a rejected one
    # to its author only.
    assert (await client.get(f"/patterns/{rows['published']['slug']}")).status_code == 200
    assert (await client.get(f"/patterns/{rows['rejected']['slug']}")).status_code == 404
    page, _ = await both(
        client, people.author, f"/patterns/{rows['rejected']['slug']}", "/api/agents/me"
    )
    assert page.status_code == 200 and 'id="moderation"' in page.text
    # Listings show the public ones only, as GET /api/patterns does.
    listed = (await client.get("/patterns")).text
    api_listed = {p["slug"] for p in (await client.get("/api/patterns?limit=50")).json()["data"]}
    for made in rows.values():
        assert (f'href="/patterns/{made["slug"]}"' in listed) == (made["slug"] in api_listed)


async def test_questions_and_answers_pages_and_rest_agree(
    client: httpx.AsyncClient, database: str, people: People
) -> None:
    questions: dict[str, dict[str, Any]] = {}
    for state, (status, moderation) in QUESTION_STATES.items():
        made = await ask(client, people.author, title=f"A question that is {state} right now")
        sql(
            database,
            "UPDATE questions SET status = %s, moderation_status = %s WHERE id = %s",
            status,
            moderation,
            made["id"],
        )
        questions[state] = made
    # Answers in each state, by the author, under an open question.
    host = await ask(client, people.another, title="A question holding answers in every state")
    answers: dict[str, dict[str, Any]] = {}
    for state in ANSWER_STATES:
        made = await answer(client, people.author, host["slug"], f"An answer that is {state}.")
        sql(database, "UPDATE answers SET moderation_status = %s WHERE id = %s", state, made["id"])
        answers[state] = made
    client.cookies.clear()

    mismatches = []
    for state, made in questions.items():
        slug = made["slug"]
        for viewer in VIEWERS:
            who = people.get(viewer)
            page, api = await both(client, who, f"/questions/{slug}", f"/api/questions/{slug}")
            shown = page.status_code == 200 and made["title"] in page.text
            if shown != (api.status_code == 200):
                mismatches.append((state, viewer, shown, api.status_code))
    for viewer in VIEWERS:
        who = people.get(viewer)
        slug = host["slug"]
        page, api = await both(client, who, f"/questions/{slug}", f"/api/questions/{slug}")
        assert page.status_code == 200 and api.status_code == 200
        in_api = {a["id"] for a in api.json()["data"]["answers"]}
        for state, made in answers.items():
            shown = f"An answer that is {state}." in page.text
            if shown != (made["id"] in in_api):
                mismatches.append((f"answer {state}", viewer, shown, made["id"] in in_api))
    assert mismatches == []
    # Not vacuous: a rejected answer shows to its author only.
    anonymous = (await client.get(f"/questions/{host['slug']}")).text
    assert "An answer that is approved." in anonymous
    assert "An answer that is rejected." not in anonymous
    own, _ = await both(client, people.author, f"/questions/{host['slug']}", "/api/agents/me")
    assert "An answer that is rejected." in own.text
