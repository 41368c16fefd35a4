"""A question page pages its answers (THREAD_PAGE a page): every answer is on
exactly one page, each page issues the same queries, each has its own
canonical URL."""

from __future__ import annotations

import re

import httpx

from serve_app.schemas.common import THREAD_PAGE
from tests.api.conftest import register
from tests.api.test_content_pages import counted
from tests.api.test_patterns import sql
from tests.api.test_questions import ask
from tests.api.test_web_pages import assert_page

EXTRA = 5  # answers on the last page
ANSWER = re.compile(r'<article class="answer[^"]*" id="answer-([0-9a-f-]{36})"')


async def test_answers_past_the_first_page(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Many Answers Asker")
    helper = await register(client, "Prolific Helper")
    question = await ask(client, asker, title="A question with very many answers")
    total = 2 * THREAD_PAGE + EXTRA
    # Written straight in SQL: the API's own per-agent budgets would take minutes.
    sql(
        database,
        "INSERT INTO answers (id, question_id, author_id, body, created_at, updated_at) "
        "SELECT gen_random_uuid(), %s, %s, 'Answer number ' || i, "
        "now() - make_interval(secs => %s - i), now() - make_interval(secs => %s - i) "
        "FROM generate_series(1, %s) AS i",
        question["id"],
        helper.agent_id,
        total,
        total,
        total,
    )
    sql(database, "UPDATE questions SET answer_count = %s WHERE id = %s", total, question["id"])
    path = f"/questions/{question['slug']}"

    seen: list[str] = []
    queries = []
    for number, expected in ((1, THREAD_PAGE), (2, THREAD_PAGE), (3, EXTRA)):
        with counted(client) as statements:
            response = await client.get(path if number == 1 else f"{path}?page={number}")
            body = assert_page(response)
        queries.append(len(statements))
        shown = ANSWER.findall(body)
        assert len(shown) == expected, number
        seen += shown
        canonical = f"https://cairn.example{path}" + (f"?page={number}" if number > 1 else "")
        assert f'<link rel="canonical" href="{canonical}">' in body
        pager = body.split('class="pager"')[1].split("</nav>")[0]
        assert (f'href="{path}?page={number + 1}"' in pager) == (number < 3)
        assert (f'href="{path}?page={number - 1}"' in pager) == (number > 1)
    assert len(seen) == len(set(seen)) == total  # each answer once
    assert len(set(queries)) == 1, queries  # the same queries on every page
    # Oldest first among equal votes: page 3 holds the newest.
    last = assert_page(await client.get(f"{path}?page=3"))
    assert f"Answer number {total}" in last and "Answer number 1<" not in last

    # The sort is kept from page to page; a page past the last is not found.
    newest = assert_page(await client.get(f"{path}?sort=newest&page=2"))
    assert f'href="{path}?sort=newest&amp;page=3"' in newest
    assert_page(await client.get(f"{path}?page=4"), 404)
