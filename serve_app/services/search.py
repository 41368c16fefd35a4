"""Search: GET /api/search, and the `similar` items shown when a pattern or a
question is created.

Semantic mode asks the vector index and this process's BM25 index
(``serve_app.runtime.index_copies.lexical``) for candidates and fuses the two rankings
(``retrieval.fusion.hybrid``); full-text mode ranks by BM25 alone. Hits are
then re-read from Postgres, so a row that stopped being visible since it was
indexed never shows.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from retrieval import fusion
from serve_app.kit import trust as trust_kit
from serve_app.kit.errors import BadRequest
from serve_app.runtime.index_copies.lexical import LexicalHits, LexicalSearch
from serve_app.runtime.semantic import Hits, NoSemanticSearch, SemanticSearch
from serve_app.schemas.patterns import tag_query
from serve_app.schemas.search import KINDS, SearchParams
from serve_app.services import views
from storage.repositories import agents as agents_repo
from storage.repositories import patterns as patterns_repo
from storage.repositories import questions as questions_repo
from storage.repositories import search as repo
from telemetry import metrics

# Results are ranked up to this depth; deeper pages are refused (a search
# is for the best matches, a list for browsing everything).
MAX_RESULTS = 1000
# The first results come from a ranking to FIRST_DEPTH (the halves'
# candidates each; the ranking evaluation fuses the 100 best of each half
# too), as many as are visible; the rest from a ranking to MAX_RESULTS, less
# what the first one showed. A fusion over more candidates orders them differently, so a depth
# that grew with the page repeated hits on one page and skipped others, and a
# depth that only reached the page's end could never say a next page exists
# (docs/decisions/search.md, "Pages").
FIRST_DEPTH = 100
SEMANTIC = "semantic"
FULLTEXT = "fulltext"
SIMILAR_MAX = 5


def _stage(stage: str) -> Any:
    """The timer of search stage ``stage`` (vectors, lexical, fusion, hydration)."""
    return metrics.SEARCH_STAGE_SECONDS.labels(stage)


async def _timed(stage: str, work: Awaitable[Any]) -> Any:
    """``work``'s result, its time recorded as search stage ``stage``."""
    t0 = time.perf_counter()
    try:
        return await work
    finally:
        _stage(stage).observe(time.perf_counter() - t0)


def _served(semantic: SemanticSearch, use_semantic: bool, vectors: Hits | None, bm25: bool) -> None:
    """Count the mode a search was served in, and why (telemetry/metrics.py)."""
    lexical = "bm25" if bm25 else "postgres"
    if vectors is not None:
        mode, reason = "semantic", ""
    elif not use_semantic:
        mode, reason = "fulltext", "requested"
    elif isinstance(semantic, NoSemanticSearch):
        mode, reason = "fallback", "semantic_disabled"
    else:
        mode, reason = "fallback", "semantic_unavailable"
    metrics.SEARCHES.labels(mode, reason, lexical).inc()


def _query_text(q: str | None) -> str:
    text = " ".join((q or "").split())
    if not text:
        raise BadRequest("Query parameter 'q' is required and must not be blank.")
    return text


@dataclass(frozen=True)
class Hit:
    kind: str
    search_id: int
    score: float
    # The halves it was ranked from (None: that half did not return it).
    lexical: float | None = None
    vector: float | None = None
    # The item's trust score, once the prior has been applied (None: none applies).
    trust: float | None = None


async def ranked(
    db: AsyncSession,
    semantic: SemanticSearch,
    lexical: LexicalSearch | None,
    kinds: Sequence[str],
    text: str,
    depth: int,
    use_semantic: bool,
    fresh: bool = False,
) -> tuple[str, list[Hit]]:
    """The mode that ran, and the hits best first.

    Both halves run at once: the vector index (which embeds the query) and
    this process's BM25 index. Without vectors (``use_semantic=false``, or
    the Embedder or the VectorIndex cannot answer) BM25 alone ranks: full-text
    mode. Only while the BM25 index is not built yet does Postgres full text
    stand in for it. ``fresh``: the BM25 index reads the change log first,
    so the ranking holds every write committed before the search began."""
    nearest: asyncio.Task[Hits | None] | None = None
    if use_semantic:
        nearest = asyncio.ensure_future(
            _timed("vectors", semantic.nearest(list(kinds), text, depth))
        )
    t0 = time.perf_counter()
    words = await lexical.search(kinds, text, depth, fresh) if lexical is not None else None
    bm25 = words is not None
    if words is None:
        words = {kind: LexicalHits(await repo.fulltext(db, kind, text, depth)) for kind in kinds}
    _stage("lexical").observe(time.perf_counter() - t0)
    vectors = await nearest if nearest is not None else None
    _served(semantic, use_semantic, vectors, bm25)
    t0 = time.perf_counter()
    hits: list[Hit] = []
    none = LexicalHits([])
    if vectors is None:
        for kind in kinds:
            found = words.get(kind, none).hits
            hits += [Hit(kind, sid, score, lexical=score) for sid, score in found]
        mode = FULLTEXT
    else:
        for kind in kinds:
            lex = words.get(kind, none)
            fused = fusion.hybrid(
                lex.hits, vectors.get(kind, []), limit=depth, lexical_scale=lex.scale, query=text
            )
            hits += [Hit(kind, int(r.key), r.score, r.lexical, r.vector) for r in fused]  # type: ignore[call-overload]
        mode = SEMANTIC
    hits.sort(key=lambda h: (-h.score, h.kind, h.search_id))
    _stage("fusion").observe(time.perf_counter() - t0)
    return mode, hits


async def search(
    db: AsyncSession,
    semantic: SemanticSearch,
    query: SearchParams,
    lexical: LexicalSearch | None = None,
    fresh: bool = False,
) -> dict[str, Any]:
    """One page of search hits. ``fresh`` (a caller with a key): the answer
    reflects every write committed before the search began, the caller's own
    included, on whichever replica answers (docs/decisions/search.md, "An
    author sees their own writes"); anonymous searches may lag by up to the
    BM25 copy's refresh period."""
    text = _query_text(query.q)
    views.check_depth(
        query.page,
        query.limit,
        MAX_RESULTS,
        f"Search returns the best {MAX_RESULTS} results; refine the query instead.",
    )
    end = query.page * query.limit
    hydration = 0.0
    patterns = pattern_filter(query)
    kinds = KINDS[query.type]
    if patterns and "pattern" in kinds:
        kinds = ["pattern"]  # no other kind can match a pattern filter

    async def to_depth(depth: int) -> tuple[str, list[tuple[Hit, uuid.UUID]], bool]:
        # Every hit is checked for visibility (the total counts those that may
        # be found now, to the depth ranked); only the page's are read in full.
        # Also whether the ranking was cut at the depth (more may follow).
        nonlocal hydration
        mode, hits = await ranked(
            db, semantic, lexical, kinds, text, depth, query.use_semantic, fresh
        )
        t0 = time.perf_counter()
        visible = trust_prior(await _visible(db, hits, query.exclude_labelled, patterns))
        hydration += time.perf_counter() - t0
        return mode, visible, len(hits) >= depth

    mode, found, cut = await to_depth(FIRST_DEPTH)
    if cut and end >= len(found):
        # The page reaches past what the first ranking shows (its visible
        # hits), and it was cut: the deeper ranking, less what the first one
        # showed, after it, so that no hit shows twice and none is skipped.
        deep_mode, deeper, _ = await to_depth(MAX_RESULTS)
        if deep_mode == mode:
            shown = {(h.kind, h.search_id) for h, _ in found}
            found = found + [f for f in deeper if (f[0].kind, f[0].search_id) not in shown]
        else:  # a half stopped answering between the two
            mode, found = deep_mode, deeper
    # ``type=all`` ranks each kind to the depth: the best MAX_RESULTS of both.
    found = found[:MAX_RESULTS]
    t0 = time.perf_counter()
    data = []
    for item, h in await _items(db, found[(query.page - 1) * query.limit : end]):
        item["components"] = {
            "lexical": _round(h.lexical),
            "vector": _round(h.vector),
            "trust": _round(h.trust),
        }
        data.append(item)
    _stage("hydration").observe(hydration + time.perf_counter() - t0)
    return {"mode": mode, **views.paged(data, query.page, query.limit, len(found))}


# --- trust: a bounded prior after fusion (docs/decisions/trust.md) ----------------


def trust_prior(
    found: Sequence[tuple[Hit, uuid.UUID, float | None]],
) -> list[tuple[Hit, uuid.UUID]]:
    """The fused hits re-ranked with trust as a bounded prior
    (``kit.trust.with_prior``): at most +15 % of a hit's own score, so it
    orders near-duplicates and leaves hits of different relevance as they
    were. Applied after fusion, apart from it; with no trust anywhere the
    order is unchanged. ``found``: each hit with its item id and its item's
    trust score (None: none applies), as ``_visible`` reads them."""
    out = []
    for h, item_id, t in found:
        if t is not None:
            h = replace(h, score=trust_kit.with_prior(h.score, t), trust=t)
        out.append((h, item_id))
    out.sort(key=lambda pair: (-pair[0].score, pair[0].kind, pair[0].search_id))
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def pattern_filter(query: SearchParams) -> repo.PatternFilter:
    """The search's pattern filters (GET /api/patterns' names and rules)."""
    return repo.PatternFilter(
        category_id=query.category_id,
        difficulty_level=query.difficulty_level,
        tech_stack=tag_query(query.tech_stack, "tech_stack"),
    )


async def _visible(
    db: AsyncSession,
    hits: Sequence[Hit],
    unlabelled: bool = False,
    patterns: repo.PatternFilter = repo.NO_FILTER,
) -> list[tuple[Hit, uuid.UUID, float | None]]:
    """The hits whose rows may be found now, in order, each with its item id
    and its item's trust score (patterns and questions; None for agents).
    ``unlabelled`` (``exclude_labelled``) and ``patterns`` (the pattern
    filters): only the items they keep, left out here, before the page is
    cut, so a page stays full."""
    found: dict[tuple[str, int], tuple[uuid.UUID, float | None]] = {}
    for kind in sorted({h.kind for h in hits}):
        ids = [h.search_id for h in hits if h.kind == kind]
        rows = await repo.visible_with_trust(db, kind, ids, unlabelled, patterns)
        found.update({(kind, sid): row for sid, row in rows.items()})
    return [(h, *found[(h.kind, h.search_id)]) for h in hits if (h.kind, h.search_id) in found]


async def _items(
    db: AsyncSession, found: Sequence[tuple[Hit, uuid.UUID]]
) -> list[tuple[dict[str, Any], Hit]]:
    """Visible hits as response items (``type``, ``score`` and the item's
    list view), in order, each with its hit."""
    rows: dict[tuple[str, uuid.UUID], dict[str, Any]] = {}
    for kind in sorted({h.kind for h, _ in found}):
        shown = await _views(db, kind, [item_id for h, item_id in found if h.kind == kind])
        rows.update({(kind, item_id): item for item_id, item in shown.items()})
    out = []
    for h, item_id in found:
        item = rows.get((h.kind, item_id))
        if item is not None:
            out.append(({"type": h.kind, "score": round(h.score, 4), **item}, h))
    return out


async def _views(
    db: AsyncSession, kind: str, item_ids: list[uuid.UUID]
) -> dict[uuid.UUID, dict[str, Any]]:
    if not item_ids:
        return {}
    if kind == "pattern":
        found = await patterns_repo.with_related(db, item_ids)
        return {p.id: views.pattern_item(p, author, cat) for p, author, cat in found}
    if kind == "agent":
        return {a.id: views.profile(a) for a in await agents_repo.by_ids(db, item_ids)}
    return {q.id: views.question_hit(q) for q in await questions_repo.by_ids(db, item_ids)}


async def similar(
    db: AsyncSession,
    semantic: SemanticSearch,
    kinds: Sequence[str],
    text: str,
    min_score: float,
    exclude: str | None = None,
) -> list[dict[str, Any]]:
    """Up to five visible items of ``kinds`` close to ``text``: by cosine
    similarity above ``min_score`` when the index answers, else rows that
    match every word of the text."""
    nearest = await semantic.nearest(list(kinds), text, SIMILAR_MAX + 1)
    hits: list[Hit] = []
    if nearest is not None:
        for kind in kinds:
            hits += [Hit(kind, sid, s) for sid, s in nearest.get(kind, []) if s >= min_score]
    else:
        for kind in kinds:
            hits += [
                Hit(kind, sid, s)
                for sid, s in await repo.fulltext(db, kind, text, SIMILAR_MAX + 1, any_word=False)
                if s >= repo.ALL_WORDS
            ]
    hits.sort(key=lambda h: (-h.score, h.kind, h.search_id))
    visible = [(h, item_id) for h, item_id, _ in await _visible(db, hits)]
    items = [i for i, _ in await _items(db, visible) if i["id"] != exclude]
    return items[:SIMILAR_MAX]
