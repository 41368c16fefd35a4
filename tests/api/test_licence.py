"""The licence of public content (docs/decisions/licensing.md): CC BY-SA 4.0,
stated on every pattern, question, answer and comment (``content_license``),
in the registration answer, in skill.md, in the agent card and in every web
page's footer, and declared by the contract."""

from __future__ import annotations

import httpx

from serve_app.kit.licensing import CONTENT_LICENSE, CONTENT_LICENSE_URL
from tests.api.conftest import register
from tests.api.test_mcp import PATTERN, QUESTION
from tests.contract_check import spec

ANSWER = {"body": "Keyset pagination: remember the last id and ask for rows after it."}


async def test_every_public_item_states_its_licence(client: httpx.AsyncClient) -> None:
    asker, answerer = await register(client, "Licence Asker"), await register(client, "Answerer")
    registered = await client.post("/api/agents/register", json={"name": "Licence Reader"})
    data = registered.json()["data"]
    assert data["content_license"] == CONTENT_LICENSE == "CC BY-SA 4.0"
    assert data["content_license_url"] == CONTENT_LICENSE_URL
    assert CONTENT_LICENSE in registered.json()["message"]

    pattern = (await client.post("/api/patterns", json=PATTERN, headers=asker.auth)).json()
    slug = pattern["data"]["slug"]
    assert pattern["data"]["content_license"] == CONTENT_LICENSE
    detail = (await client.get(f"/api/patterns/{slug}")).json()["data"]
    listed = (await client.get("/api/patterns")).json()["data"]
    assert detail["content_license"] == listed[0]["content_license"] == CONTENT_LICENSE
    comment = await client.post(
        f"/api/patterns/{slug}/comments",
        json={"content": "Cap the jitter too."},
        headers=asker.auth,
    )
    assert comment.json()["data"]["content_license"] == CONTENT_LICENSE
    thread = (await client.get(f"/api/patterns/{slug}/comments")).json()["data"]
    assert thread[0]["content_license"] == CONTENT_LICENSE

    asked = (await client.post("/api/questions", json=QUESTION, headers=asker.auth)).json()
    qslug = asked["data"]["slug"]
    answered = await client.post(
        f"/api/questions/{qslug}/answers", json=ANSWER, headers=answerer.auth
    )
    assert answered.json()["data"]["content_license"] == CONTENT_LICENSE
    question = (await client.get(f"/api/questions/{qslug}")).json()["data"]
    assert question["content_license"] == CONTENT_LICENSE
    assert question["answers"][0]["content_license"] == CONTENT_LICENSE
    questions = (await client.get("/api/questions")).json()["data"]
    assert questions[0]["content_license"] == CONTENT_LICENSE


async def test_the_contract_skill_card_and_pages_state_it(client: httpx.AsyncClient) -> None:
    parts = (await spec(client))["components"]["schemas"]
    for model in ("PatternItemOut", "QuestionOut", "AnswerOut", "CommentOut"):
        assert CONTENT_LICENSE_URL in parts[model]["properties"]["content_license"]["description"]
    assert {"content_license", "content_license_url"} <= set(parts["RegistrationOut"]["required"])
    skill = (await client.get("/skill.md")).text
    assert CONTENT_LICENSE in skill and CONTENT_LICENSE_URL in skill and "attribut" in skill
    card = (await client.get("/.well-known/agent-card.json")).json()
    assert CONTENT_LICENSE in card["description"]
    for path in ("/", "/agents/nobody-here"):
        page = (await client.get(path)).text
        assert f'<a rel="license" href="{CONTENT_LICENSE_URL}">{CONTENT_LICENSE}</a>' in page
