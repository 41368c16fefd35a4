"""GET /api/search and `similar` over real Postgres, the real model and real
FAISS (in process: the Indexer that the VectorIndex deployment runs)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import text

from actors.ratelimit import Rule
from retrieval import fusion
from serve_app.runtime.semantic import LocalSearch
from serve_app.schemas.patterns import PatternItemOut
from serve_app.schemas.search import SearchOut
from storage.db import libpq_url
from storage.repositories import search as repo
from tests.api.conftest import Registered, assert_error, register, scalar
from tests.api.test_patterns import categories, sql

# Topics far apart, so that the nearest pattern to a paraphrase is unambiguous.
PATTERNS = {
    "retry": {
        "title": "Retry flaky HTTP calls",
        "description": "Exponential backoff with jitter for unreliable APIs.",
        "content": "Wrap the request, back off exponentially, add jitter, cap the retries.",
    },
    "csv": {
        "title": "Stream a huge CSV file without loading it",
        "description": "Read rows lazily with the csv module and a generator.",
        "content": "Open the file, iterate csv.reader row by row, aggregate on the fly.",
    },
    "cron": {
        "title": "Schedule nightly jobs with cron",
        "description": "A crontab line that runs a backup script at 02:30 every day.",
        "content": "Edit with crontab -e, use absolute paths, redirect output to a log.",
    },
    "oauth": {
        "title": "Refresh OAuth2 access tokens before they expire",
        "description": "Keep a token cache and renew it ahead of its expiry time.",
        "content": "Store expires_at, refresh when less than a minute remains, retry once on 401.",
    },
}

# What the csv pattern becomes in the tests of edits.
CARBONARA = {
    "title": "Make spaghetti carbonara",
    "description": "Eggs, pecorino, guanciale and pepper.",
    "content": "Boil the spaghetti, crisp the guanciale, toss off the heat with egg.",
}


@pytest.fixture
def roomy(client: httpx.AsyncClient) -> Iterator[None]:
    """Room for many patterns and questions per agent in one test."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    ctx.rules = {
        **saved,
        "pattern_create": Rule("pattern_create", 10_000, 3600),
        "question_create": Rule("question_create", 10_000, 3600),
    }
    yield
    ctx.rules = saved


async def publish(client: httpx.AsyncClient, agent: Registered, **fields: Any) -> dict[str, Any]:
    response = await client.post("/api/patterns", headers=agent.auth, json=fields)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def corpus(client: httpx.AsyncClient) -> tuple[Registered, dict[str, str]]:
    author = await register(client, "Corpus Author")
    ids = {}
    for key, fields in PATTERNS.items():
        ids[key] = (await publish(client, author, **fields))["data"]["id"]
    return author, ids


async def search(
    client: httpx.AsyncClient, headers: dict[str, str] | None = None, **params: Any
) -> dict[str, Any]:
    response = await client.get("/api/search", params=params, headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    # The route sends the service's answer without FastAPI's check against its
    # response model (serve_app/routers/search.py): every answer here is held
    # to it instead, and is what FastAPI would have sent.
    checked = SearchOut.model_validate(body)
    assert checked.model_dump(mode="json", exclude_unset=True) == body
    assert response.headers["content-type"] == "application/json"
    return body


# What a list shows of a pattern (``views.pattern_item``), as the contract names it.
LIST_FIELDS = tuple(PatternItemOut.model_fields)


def ids_of(body: dict[str, Any]) -> list[str]:
    return [hit["id"] for hit in body["data"]]


# --- input ------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"q": ""},
        {"q": "   "},
        {"q": "x", "limit": 101},
        {"q": "x", "limit": 0},
        {"q": "x", "page": 0},
        {"q": "x", "type": "questions"},
        {"q": "x", "use_semantic": "perhaps"},
        {"q": "x", "page": 11, "limit": 100},
        {"q": "x" * 1001},
    ],
)
async def test_bad_input_is_a_400(client: httpx.AsyncClient, params: dict[str, Any]) -> None:
    assert_error(await client.get("/api/search", params=params), 400)


async def test_sixty_searches_a_minute_per_ip(client: httpx.AsyncClient) -> None:
    for _ in range(60):
        assert (await client.get("/api/search", params={"q": "cron"})).status_code == 200
    refused = await client.get("/api/search", params={"q": "cron"})
    assert_error(refused, 429)
    assert refused.headers["X-RateLimit-Limit"] == "60"
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    assert int(refused.headers["Retry-After"]) >= 1
    assert "X-RateLimit-Reset" in refused.headers


# --- full text ----------------------------------------------------------------


async def test_fulltext_mode_without_semantic_search(client: httpx.AsyncClient) -> None:
    """The app's default here has no semantic search: full text answers."""
    _, ids = await corpus(client)
    body = await search(client, q="crontab backup")
    assert body["mode"] == "fulltext"
    assert ids_of(body) == [ids["cron"]]
    hit = body["data"][0]
    assert hit["type"] == "pattern" and hit["score"] > 0
    assert hit["title"] == PATTERNS["cron"]["title"] and hit["author"]["username"]
    assert body["pagination"] == {
        "page": 1,
        "limit": 20,
        "total": 1,
        "total_pages": 1,
        "has_more": False,
    }
    # Some words matching still finds rows; rows matching all rank first.
    body = await search(client, q="exponential backoff csv generator")
    assert set(ids_of(body)) == {ids["retry"], ids["csv"]}


async def test_fulltext_hides_archived_rejected_and_inactive(
    client: httpx.AsyncClient, database: str
) -> None:
    author, ids = await corpus(client)
    await client.delete(f"/api/patterns/{ids['cron']}", headers=author.auth)
    sql(database, "UPDATE patterns SET moderation_status = 'rejected' WHERE id = %s", ids["csv"])
    assert await search(client, q="crontab backup") == {
        "mode": "fulltext",
        "data": [],
        "pagination": {"page": 1, "limit": 20, "total": 0, "total_pages": 0, "has_more": False},
    }
    assert ids_of(await search(client, q="csv generator")) == []
    bot = await register(client, "Kubernetes Whisperer", description="Helm charts and pods.")
    assert ids_of(await search(client, q="kubernetes", type="agents")) == [bot.agent_id]
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", bot.agent_id)
    assert ids_of(await search(client, q="kubernetes", type="agents")) == []


async def test_paging(client: httpx.AsyncClient, roomy: None) -> None:
    author = await register(client, "Pager")
    for n in range(5):
        await publish(
            client,
            author,
            title=f"Backup recipe number {n}",
            description="Nightly backup of a database.",
            content="pg_dump then upload",
        )
    first = await search(client, q="backup", limit=2, use_semantic="false")
    second = await search(client, q="backup", limit=2, page=2, use_semantic="false")
    third = await search(client, q="backup", limit=2, page=3, use_semantic="false")
    assert first["pagination"]["total"] == 5 and first["pagination"]["has_more"] is True
    assert third["pagination"]["has_more"] is False and len(third["data"]) == 1
    assert len(set(ids_of(first) + ids_of(second) + ids_of(third))) == 5


async def test_fulltext_ranks_a_bounded_sample_of_common_words(
    client: httpx.AsyncClient, database: str, roomy: None
) -> None:
    """Every-word matches rank first; then a rare word brings all of its
    matches to the ranking and a common word a bounded sample of its own."""
    author = await register(client, "Sampler")

    async def sid(title: str, description: str = "Kept for later use.") -> int:
        body = await publish(client, author, title=title, description=description, content="Notes.")
        found = scalar(database, "SELECT search_id FROM patterns WHERE id = %s", body["data"]["id"])
        return int(found)

    common = {await sid(f"Backup recipe {n}", "Backup kept for later use.") for n in range(8)}
    rare = await sid("Zeppelin mooring")
    both = await sid("Zeppelin backup")
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    async with ctx.sessions() as session:
        everything = await repo.fulltext(session, "pattern", "zeppelin backup", 50)
        strict = await repo.fulltext(session, "pattern", "zeppelin backup", 50, any_word=False)
        top = await repo.fulltext(session, "pattern", "zeppelin backup", 4, candidates=1000)
        # Four candidates for two words: two rows per word at most.
        sampled = await repo.fulltext(session, "pattern", "zeppelin backup", 4, candidates=4)
    assert [s for s, _ in everything] == [both, *[s for s, _ in everything[1:-1]], rare]
    assert {s for s, _ in everything[1:-1]} == common
    assert everything[0][1] >= repo.ALL_WORDS > everything[1][1]
    assert strict == everything[:1]
    assert top == everything[:4]
    found = [s for s, _ in sampled]
    # Both rows with the rare word, and one or two of the nine with "backup".
    assert found[0] == both and found[-1] == rare
    assert len(found) in (3, 4) and set(found[1:-1]) < common


# --- semantic -----------------------------------------------------------------


async def test_paraphrase_sharing_no_word_is_found(
    client: httpx.AsyncClient, semantic: LocalSearch
) -> None:
    _, ids = await corpus(client)
    await semantic.settle()
    # No word in common with the cron pattern's text.
    query = "trigger a task automatically around midnight"
    assert ids_of(await search(client, q=query, use_semantic="false")) == []
    body = await search(client, q=query)
    assert body["mode"] == "semantic"
    assert ids_of(body)[0] == ids["cron"]
    assert body["data"][0]["score"] > 0
    scores = [h["score"] for h in body["data"]]
    assert scores == sorted(scores, reverse=True)
    # use_semantic=false forces full text even when the index is ready.
    assert (await search(client, q="cron", use_semantic="false"))["mode"] == "fulltext"


async def test_hybrid_fuses_bm25_and_cosine_and_shows_both(
    client: httpx.AsyncClient, semantic: LocalSearch
) -> None:
    """Each hit's score is the fixed convex combination of its BM25 score
    (divided by the search's best BM25 score) and its cosine
    (retrieval.fusion.hybrid), and both are in the hit's ``components``.
    A sentence-long question that a decoy shares most words with still finds
    what it means near the top (the decoy, which BM25 alone ranks first, may
    stay above it)."""
    author, ids = await corpus(client)
    decoy = await publish(
        client,
        author,
        title="Night shift rota for the support team",
        description="Who is on call every night, from half past two until six.",
        content="Run the backup script check by hand; nothing is automatically paged.",
    )
    await semantic.settle()
    question = "run my backup script every night at half past two automatically"
    lexical = await search(client, q=question, use_semantic="false")
    assert lexical["mode"] == "fulltext"
    assert lexical["data"][0]["id"] == decoy["data"]["id"]
    for hit in lexical["data"]:
        assert hit["components"]["vector"] is None
        assert hit["score"] == hit["components"]["lexical"] > 0

    body = await search(client, q=question)
    assert body["mode"] == "semantic"
    assert ids["cron"] in ids_of(body)[:2]
    hits = await semantic.nearest(["pattern"], question, 100)
    assert hits is not None
    cosines = {round(score, 4) for _, score in hits["pattern"]}
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    index = ctx.lexical.indexes["pattern"]
    # The search's best BM25 score (the decoy's) normalises the lexical half;
    # the question names no identifier, so the fixed weight applies.
    top = index.search(question, 1)[0][1]
    assert not fusion.names_identifier(question)
    w = fusion.DEFAULT_HYBRID.lexical_weight
    for hit in body["data"]:
        parts = hit["components"]
        assert parts["vector"] in cosines
        lex = (parts["lexical"] or 0.0) / top
        assert hit["score"] == pytest.approx(w * lex + (1 - w) * parts["vector"], abs=1e-3)


async def test_fulltext_ranks_a_rare_word_above_a_common_one(
    client: httpx.AsyncClient, roomy: None
) -> None:
    """BM25's inverse document frequency: of two patterns matching one query
    word each, the one with the word few patterns contain ranks first, even
    where the common word sits in the title and the rare one in the content."""
    author = await register(client, "Idf")
    for n in range(6):
        await publish(
            client,
            author,
            title=f"Backup recipe {n}",
            description="A backup kept for later.",
            content="Notes.",
        )
    rare = await publish(
        client,
        author,
        title="Mooring lines",
        description="Knots for the mast.",
        content="How to moor a zeppelin in wind.",
    )
    body = await search(client, q="zeppelin backup", use_semantic="false")
    assert body["mode"] == "fulltext"
    assert ids_of(body)[0] == rare["data"]["id"]
    assert body["pagination"]["total"] == 7
    scores = [h["score"] for h in body["data"]]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[1]


async def test_bm25_index_sees_a_transaction_that_commits_late(
    client: httpx.AsyncClient, database: str
) -> None:
    """The index follows the change log by transaction, not by log order: an
    edit logged first but committed after a later one is not skipped."""
    _, ids = await corpus(client)
    with (
        psycopg.connect(libpq_url(database)) as early,
        psycopg.connect(libpq_url(database)) as late,
    ):
        early.execute(
            "UPDATE patterns SET content = 'zeppelin mooring' WHERE id = %s", [ids["csv"]]
        )
        late.execute("UPDATE patterns SET content = 'zeppelin hangar' WHERE id = %s", [ids["cron"]])
        late.commit()
        # The later edit shows; the earlier one is not committed yet.
        assert ids_of(await search(client, q="zeppelin", use_semantic="false")) == [ids["cron"]]
        early.commit()
    found = ids_of(await search(client, q="zeppelin", use_semantic="false"))
    assert set(found) == {ids["cron"], ids["csv"]}
    # Hidden rows leave the index (not only the page).
    sql(database, "UPDATE patterns SET moderation_status = 'rejected' WHERE id = %s", ids["csv"])
    assert ids_of(await search(client, q="mooring", use_semantic="false")) == []
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    assert ctx.lexical.indexes["pattern"].search("mooring", 5) == []


async def test_concurrent_searches_share_reads_of_the_change_log(
    client: httpx.AsyncClient, database: str
) -> None:
    """Searches waiting for the change log share the next read instead of
    making one each, and each still sees what was committed before it began."""
    _, ids = await corpus(client)
    sql(database, "UPDATE patterns SET content = 'zeppelin mooring' WHERE id = %s", ids["csv"])
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    before = ctx.lexical.counters["reads"]
    bodies = await asyncio.gather(
        *(search(client, q="zeppelin", use_semantic="false") for _ in range(12))
    )
    assert all(ids_of(body) == [ids["csv"]] for body in bodies)
    # One read may be under way when the others arrive; they share the next.
    assert 1 <= ctx.lexical.counters["reads"] - before <= 3


async def test_an_author_sees_their_own_write_however_stale_others_may_be(
    client: httpx.AsyncClient,
) -> None:
    """With the BM25 copy allowed to lag (CAIRN_SEARCH_LEXICAL_REFRESH_S),
    an anonymous search may miss a write for that long; a search with the
    author's key reads the change log first and finds it at once
    (docs/decisions/search.md, "An author sees their own writes")."""
    author, ids = await corpus(client)
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.lexical.refresh_s
    ctx.lexical.refresh_s = 3600.0
    try:
        assert ids_of(await search(client, q="zeppelin", use_semantic="false")) == []
        edited = await client.put(
            f"/api/patterns/{ids['csv']}", headers=author.auth, json={"content": "zeppelin mooring"}
        )
        assert edited.status_code == 200, edited.text
        # Read less than an hour ago: anonymous searches use the copy as it is.
        assert ids_of(await search(client, q="zeppelin", use_semantic="false")) == []
        mine = await search(client, author.auth, q="zeppelin", use_semantic="false")
        assert ids_of(mine) == [ids["csv"]]
        # A bad key is refused, as on every route that reads one.
        assert_error(
            await client.get(
                "/api/search", params={"q": "zeppelin"}, headers={"Authorization": "Bearer x"}
            ),
            401,
        )
    finally:
        ctx.lexical.refresh_s = saved


async def test_fallback_ranks_with_bm25(client: httpx.AsyncClient, semantic: LocalSearch) -> None:
    """With the embedder stopped the answer is full text, ranked by this
    process's BM25 index (components: lexical only), and edits show at once."""
    author, ids = await corpus(client)
    await semantic.settle()
    semantic.stopped = True
    body = await search(client, q="jitter backoff retries")
    assert body["mode"] == "fulltext"
    assert ids_of(body) == [ids["retry"]]
    assert body["data"][0]["components"]["vector"] is None
    assert body["data"][0]["components"]["lexical"] > 0
    changed = await client.put(
        f"/api/patterns/{ids['csv']}",
        headers=author.auth,
        json={"content": "jitter jitter jitter backoff"},
    )
    assert changed.status_code == 200, changed.text
    assert set(ids_of(await search(client, q="jitter backoff"))) == {ids["retry"], ids["csv"]}


async def test_nonsense_returns_little(client: httpx.AsyncClient, semantic: LocalSearch) -> None:
    """The similarity floor: vector search alone does not pad results with
    confident nonsense."""
    await corpus(client)
    await semantic.settle()
    body = await search(client, q="qwxz blorptangle frumious")
    assert body["mode"] == "semantic"
    assert body["data"] == []


async def test_updates_and_deletions_show_in_search(
    client: httpx.AsyncClient, semantic: LocalSearch, database: str
) -> None:
    author, ids = await corpus(client)
    await semantic.settle()
    query = "cook a pasta dinner for guests"
    assert ids["csv"] not in ids_of(await search(client, q=query))[:1]

    updated = await client.put(
        f"/api/patterns/{ids['csv']}",
        headers=author.auth,
        json=CARBONARA,
    )
    assert updated.status_code == 200, updated.text
    await semantic.settle()
    assert ids_of(await search(client, q=query))[0] == ids["csv"]
    assert ids["csv"] not in ids_of(await search(client, q="read a big spreadsheet lazily"))[:1]

    # Archived: out of the index too, not just filtered at read time.
    await client.delete(f"/api/patterns/{ids['cron']}", headers=author.auth)
    await semantic.settle()
    assert ids["cron"] not in ids_of(await search(client, q="run my script every midnight"))
    stats = await semantic.stats()
    assert stats is not None and stats["indexes"]["pattern"]["size"] == 3

    # Rejected by a moderator.
    sql(database, "UPDATE patterns SET moderation_status = 'rejected' WHERE id = %s", ids["oauth"])
    await semantic.settle()
    assert ids["oauth"] not in ids_of(await search(client, q="renew login credentials early"))
    stats = await semantic.stats()
    assert stats is not None and stats["indexes"]["pattern"]["size"] == 2

    # The author's account deleted: everything of theirs leaves the index.
    assert (
        await client.delete(f"/api/agents/{author.username}", headers=author.auth)
    ).status_code == 200
    await semantic.settle()
    assert ids_of(await search(client, q="retry a flaky request")) == []
    stats = await semantic.stats()
    assert stats is not None and stats["indexes"]["pattern"]["size"] == 0
    # Stored vectors of removed rows are dropped too.
    assert scalar(database, "SELECT count(*) FROM embeddings WHERE kind = 'pattern'") == 0


async def test_a_model_switch_keeps_what_changed_while_its_indexes_were_built(
    client: httpx.AsyncClient, semantic: LocalSearch
) -> None:
    """Activating a model builds its indexes (minutes at scale) while the
    worker goes on against the old ones. A pattern archived during the build
    leaves the new indexes, and one published during it enters them, before
    they go live (the build is held at that point here, by wrapping it)."""
    author, ids = await corpus(client)
    await semantic.settle()
    indexer = semantic.indexer
    build = indexer._load
    added: dict[str, str] = {}

    async def build_while_things_change(model: str) -> Any:
        built = await build(model)
        archived = await client.delete(f"/api/patterns/{ids['cron']}", headers=author.auth)
        assert archived.status_code == 200, archived.text
        added.update(await publish(client, author, **CARBONARA))
        await semantic.settle()  # the worker, against the old indexes
        return built

    indexer._load = build_while_things_change  # type: ignore[method-assign]
    try:
        sizes = await indexer.activate(semantic.encoder.model)
    finally:
        del indexer._load
    assert sizes["pattern"] == 4  # the four of the corpus, less cron, plus carbonara
    hits = await semantic.nearest(["pattern"], "cook a pasta dinner for guests", 5)
    assert hits is not None
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    async with ctx.sessions() as session:
        by_search_id = {
            sid: str(item)
            for sid, item in (
                await session.exec(  # type: ignore[call-overload]
                    text("SELECT search_id, id FROM patterns")
                )
            ).all()
        }
    found = [by_search_id[sid] for sid, _ in hits["pattern"]]
    assert found[0] == added["data"]["id"] and ids["cron"] not in found


async def test_agents_and_all(
    client: httpx.AsyncClient, semantic: LocalSearch, database: str
) -> None:
    _, ids = await corpus(client)
    chef = await register(
        client, "Pasta Chef Bot", description="I write recipes for Italian home cooking."
    )
    await semantic.settle()
    body = await search(client, q="someone who knows about cuisine", type="agents")
    assert body["mode"] == "semantic"
    assert ids_of(body)[0] == chef.agent_id
    assert body["data"][0]["type"] == "agent" and body["data"][0]["username"] == chef.username
    assert all(hit["type"] == "agent" for hit in body["data"])

    mixed = await search(client, q="Italian cooking recipes and nightly cron backups", type="all")
    kinds = {hit["type"] for hit in mixed["data"]}
    assert kinds == {"agent", "pattern"}
    assert chef.agent_id in ids_of(mixed) and ids["cron"] in ids_of(mixed)
    scores = [h["score"] for h in mixed["data"]]
    assert scores == sorted(scores, reverse=True)

    # Deactivated: gone from agent search.
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", chef.agent_id)
    await semantic.settle()
    assert chef.agent_id not in ids_of(await search(client, q="cuisine expert", type="agents"))


async def test_rebuild_after_restart_gives_the_same_results(
    client: httpx.AsyncClient, semantic: LocalSearch, database: str, encoder: Any
) -> None:
    """A new Indexer over the same Postgres rebuilds the indexes from the
    stored vectors: same hits, same scores, nothing embedded again."""
    await corpus(client)
    await semantic.settle()
    queries = ["run my script every midnight", "renew login credentials early", "parse data"]
    before = [await search(client, q=q) for q in queries]

    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    restarted = LocalSearch(
        ctx.settings.indexer_config(database), encoder, ctx.sessions, ctx.engine
    )
    ctx.search = restarted
    after = [await search(client, q=q) for q in queries]
    assert after == before
    assert restarted.indexer.counters["embedded"] == 0
    assert await restarted.settle() == 0


async def test_crash_loses_nothing_and_embeds_nothing_twice(
    client: httpx.AsyncClient, semantic: LocalSearch, database: str, encoder: Any
) -> None:
    _, ids = await corpus(client)
    # The embedder goes down after the indexes loaded, while the worker
    # embeds: its transaction rolls back and the jobs stay queued.
    await semantic.indexer.start()
    semantic.stopped = True
    with pytest.raises(ConnectionError):
        await semantic.settle()
    assert scalar(database, "SELECT count(*) FROM search_jobs") == 5  # 4 patterns, 1 agent
    assert scalar(database, "SELECT count(*) FROM embeddings") == 0

    # "Restart": a new worker embeds every pending row once.
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    restarted = LocalSearch(
        ctx.settings.indexer_config(database), encoder, ctx.sessions, ctx.engine
    )
    ctx.search = restarted
    assert await restarted.settle() >= 4
    assert restarted.indexer.counters["embedded"] == 5  # 4 patterns + the author
    assert scalar(database, "SELECT count(*) FROM search_jobs") == 0
    assert ids_of(await search(client, q="run my script every midnight"))[0] == ids["cron"]

    # Saving the same text again queues a job but embeds nothing.
    author_key = scalar(database, "SELECT count(*) FROM embeddings")
    sql(database, "UPDATE patterns SET title = title || ' ' WHERE id = %s", ids["cron"])
    sql(database, "UPDATE patterns SET title = rtrim(title) WHERE id = %s", ids["cron"])
    assert scalar(database, "SELECT count(*) FROM search_jobs") == 2
    await restarted.settle()
    assert restarted.indexer.counters["embedded"] == 5
    assert scalar(database, "SELECT count(*) FROM embeddings") == author_key


async def test_a_hit_shows_the_pattern_as_its_own_page_does(
    client: httpx.AsyncClient, roomy: None
) -> None:
    """Search and the filtered list read their pages straight through psycopg
    (``patterns_repo.with_related``; trending too, tests/api/test_trending.py);
    each item's list fields, the view count and trust summary included, are
    those the pattern's own page and the plain list (the ORM's read) show."""
    author, ids = await corpus(client)
    cat = (await categories(client))[0]
    voter = await register(client, "Voter")
    path = f"/api/patterns/{ids['cron']}"
    changed = await client.put(
        path,
        headers=author.auth,
        json={"category_id": cat["id"], "use_case_tags": ["backups"], "tech_stack": ["cron"]},
    )
    assert changed.status_code == 200, changed.text
    voted = await client.post(f"{path}/vote", headers=voter.auth, json={"vote_type": "upvote"})
    assert voted.status_code == 200, voted.text
    for _ in range(2):
        await client.get(path)
    detail = (await client.get(path)).json()["data"]
    assert detail["view_count"] == 3 and detail["vote_score"] == 1
    hit = next(
        h for h in (await search(client, q="crontab backup"))["data"] if h["id"] == ids["cron"]
    )
    found = await client.get("/api/patterns", params={"search": "crontab"})
    assert found.status_code == 200, found.text
    (match,) = found.json()["data"]
    listed = (await client.get("/api/patterns", params={"limit": 50})).json()["data"]
    item = next(i for i in listed if i["id"] == ids["cron"])
    other = next(i for i in listed if i["id"] == ids["retry"])
    for shown in (hit, match, item):
        assert {k: shown[k] for k in LIST_FIELDS} == {k: detail[k] for k in LIST_FIELDS}
    assert item["category"] == {"id": cat["id"], "name": cat["name"], "slug": cat["slug"]}
    assert other["category"] is None and other["view_count"] == 0
    assert item["author"]["username"] == author.username


async def test_votes_and_views_queue_nothing(client: httpx.AsyncClient, database: str) -> None:
    author, ids = await corpus(client)
    voter = await register(client, "Voter")
    sql(database, "DELETE FROM search_jobs")
    await client.post(
        f"/api/patterns/{ids['cron']}/vote", headers=voter.auth, json={"vote_type": "upvote"}
    )
    await client.get(f"/api/patterns/{ids['cron']}")
    assert scalar(database, "SELECT count(*) FROM search_jobs") == 0
    changed = await client.put(
        f"/api/patterns/{ids['cron']}",
        headers=author.auth,
        json={"description": "A changed description."},
    )
    assert changed.status_code == 200, changed.text
    assert scalar(database, "SELECT count(*) FROM search_jobs") == 1


async def test_fallback_when_the_embedder_is_stopped(
    client: httpx.AsyncClient, semantic: LocalSearch
) -> None:
    _, ids = await corpus(client)
    await semantic.settle()
    assert (await search(client, q="crontab backup"))["mode"] == "semantic"
    semantic.stopped = True
    body = await search(client, q="crontab backup")
    assert body["mode"] == "fulltext"
    assert ids_of(body) == [ids["cron"]]


# --- similar ------------------------------------------------------------------


async def test_similar_patterns_and_questions_on_create(
    client: httpx.AsyncClient, semantic: LocalSearch, roomy: None
) -> None:
    author, ids = await corpus(client)
    await semantic.settle()
    again = await publish(
        client,
        author,
        title="Retrying unreliable HTTP requests",
        description="Back off exponentially between attempts when an API call fails.",
        content="Use a capped exponential delay with random jitter.",
    )
    similar = again["similar"]
    assert [s["id"] for s in similar] == [ids["retry"]]
    assert similar[0]["type"] == "pattern" and similar[0]["score"] >= 0.6

    unrelated = await publish(
        client,
        author,
        title="Tune a guitar by ear",
        description="Match each string to the fifth fret of the one below.",
        content="Start from the low E and work upwards.",
    )
    assert unrelated["similar"] == []

    await semantic.settle()
    asked = await client.post(
        "/api/questions",
        headers=author.auth,
        json={
            "title": "How should I retry failing HTTP API calls?",
            "body": "My requests to a flaky API fail now and then; what backoff should I use?",
        },
    )
    assert asked.status_code == 201, asked.text
    similar = asked.json()["similar"]
    assert similar and similar[0]["type"] == "pattern"
    assert {s["id"] for s in similar} <= {ids["retry"], again["data"]["id"]}
    await semantic.settle()
    twice = await client.post(
        "/api/questions",
        headers=author.auth,
        json={
            "title": "Retrying flaky HTTP API calls: which backoff?",
            "body": "Calls to an unreliable API fail from time to time; how to back off?",
        },
    )
    similar = twice.json()["similar"]
    assert asked.json()["data"]["id"] in [s["id"] for s in similar if s["type"] == "question"]
    question = next(s for s in similar if s["type"] == "question")
    assert {"title", "slug", "status", "answer_count"} <= set(question)


async def test_embedder_torch_threads() -> None:
    """A CPU Embedder replica encodes queries and small calls on one thread
    and bulk calls on CAIRN_EMBEDDER_THREADS (0: every core). On PyTorch the
    thread count is set per call, in the thread that runs the model; on ONNX
    Runtime (the CPU default) a bulk call runs its batches on that many
    threads at once; both give the same vectors."""
    import os

    import numpy as np
    import torch

    from embeddings.config import EmbedderConfig
    from embeddings.deployments import BULK_MIN, Embedder

    saved = torch.get_num_threads()
    try:
        cls = Embedder.func_or_class  # the class behind the deployment
        two = cls(EmbedderConfig(device="cpu", threads=2, backend="torch"))
        assert two.describe() == {
            "model": EmbedderConfig().model,
            "device": "cpu",
            "backend": "torch",
            "threads": {"query": 1, "bulk": 2},
        }
        assert [two.threads_for(n) for n in (1, BULK_MIN - 1, BULK_MIN, 500)] == [1, 1, 2, 2]
        cores = len(os.sched_getaffinity(0))
        assert cls(EmbedderConfig(device="cpu")).describe()["threads"]["bulk"] == cores

        encoder = two._encoder(EmbedderConfig().model)
        texts = [f"rotate the logs of service {i} every night" for i in range(BULK_MIN)]
        one_thread = encoder.encode(texts, threads=1)
        assert torch.get_num_threads() == 1
        two_threads = encoder.encode(texts, threads=2)
        assert torch.get_num_threads() == 2
        assert np.abs(one_thread - two_threads).max() < 1e-5
        bulk = await two.embed_many(texts)
        assert bulk.shape == (BULK_MIN, 384)
        assert np.abs(bulk - one_thread).max() < 1e-5

        onnx = cls(EmbedderConfig(device="cpu", threads=2))
        assert onnx.describe()["backend"] == "onnx"
        fast = await onnx.embed_many(texts)
        assert (fast * one_thread).sum(axis=1).min() >= 0.9999
        query = onnx._encoder(EmbedderConfig().model).encode(texts[:1], threads=1)[0]
        assert float(query @ one_thread[0]) >= 0.9999
    finally:
        torch.set_num_threads(saved)


async def test_paging_follows_has_more_without_repeats(
    client: httpx.AsyncClient, database: str, semantic: LocalSearch
) -> None:
    """Following has_more pages through every hit, in both modes, each once:
    the first 100 come from one ranking whatever the page, the rest from a
    deeper one less what the first showed. (A depth that grew with the page
    said has_more false after 60 hits, and repeated hits across pages.)"""
    author = await register(client, "Bulk Author")
    sql(
        database,
        "INSERT INTO patterns (id, author_id, title, slug, description, content)"
        " SELECT gen_random_uuid(), %s, 'Nightly database backup, variant ' || n,"
        " 'nightly-backup-' || n, 'Dump the database every night and keep ' || n || ' copies.',"
        " 'pg_dump, compress, upload' FROM generate_series(1, 130) AS n",
        author.agent_id,
    )
    await semantic.settle()
    for mode in ("true", "false"):
        pages: list[list[str]] = []
        while True:
            body = await search(
                client,
                q="nightly database backup",
                limit=20,
                page=len(pages) + 1,
                use_semantic=mode,
            )
            pages.append(ids_of(body))
            if not body["pagination"]["has_more"]:
                break
        shown = [hit for page in pages for hit in page]
        assert len(shown) == len(set(shown)) == 130, mode
        assert len(pages) == 7 and len(pages[-1]) == 10, mode


async def test_a_search_page_past_the_ranking_depth_is_page_too_deep(
    client: httpx.AsyncClient,
) -> None:
    """The one page-depth rule, at search's depth (the best 1,000 hits)."""
    deep = await client.get("/api/search", params={"q": "retry", "limit": 100, "page": 11})
    body = assert_error(deep, 400, "page_too_deep")
    assert "1000" in body["message"]
    assert (
        await client.get("/api/search", params={"q": "retry", "limit": 100, "page": 10})
    ).status_code == 200
