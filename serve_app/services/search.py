"""Search: GET /api/search, and the `similar` items shown when a pattern or a
question is created.

Semantic mode asks the vector index and Postgres full-text search for
candidates and fuses the two rankings (``embeddings.ranking``); full-text
mode ranks by Postgres alone. Hits are then re-read from Postgres, so a row
that stopped being visible since it was indexed never shows.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings import ranking
from serve_app.errors import BadRequest
from serve_app.schemas.search import KINDS
from serve_app.search import Hits, SemanticSearch
from serve_app.services import views
from storage.repositories import agents as agents_repo
from storage.repositories import patterns as patterns_repo
from storage.repositories import questions as questions_repo
from storage.repositories import search as repo

# Results are ranked up to this depth; deeper pages are refused (a search
# is for the best matches, a list for browsing everything).
MAX_RESULTS = 1000
# Candidates each method contributes to the fusion, at least.
MIN_DEPTH = 50
SEMANTIC = "semantic"
FULLTEXT = "fulltext"
SIMILAR_MAX = 5


@dataclass(frozen=True)
class SearchQuery:
    q: str | None
    type: str = "patterns"
    limit: int = 20
    page: int = 1
    use_semantic: bool = True


def _query_text(q: str | None) -> str:
    text = " ".join((q or "").split())
    if not text:
        raise BadRequest("Query parameter 'q' is required and must not be blank.")
    return text


async def ranked(
    db: AsyncSession,
    semantic: SemanticSearch,
    kinds: Sequence[str],
    text: str,
    depth: int,
    use_semantic: bool,
) -> tuple[str, list[tuple[str, int, float]]]:
    """The mode that ran, and (kind, search_id, score) best first."""
    nearest: asyncio.Task[Hits | None] | None = None
    if use_semantic:
        # The index works while Postgres ranks the full-text candidates.
        nearest = asyncio.ensure_future(semantic.nearest(list(kinds), text, depth))
    # The fusion gives rows matching only some words nothing (tuned on the
    # evaluation set), so semantic mode asks Postgres for all-word matches
    # only: the same fused ranking without ranking every partial match.
    fulltext = {
        kind: await repo.fulltext(db, kind, text, depth, any_word=nearest is None) for kind in kinds
    }
    vectors = await nearest if nearest is not None else None
    hits: list[tuple[str, int, float]] = []
    if vectors is None:
        if nearest is not None:  # semantic search could not answer: all matches
            fulltext = {kind: await repo.fulltext(db, kind, text, depth) for kind in kinds}
        for kind in kinds:
            hits += [(kind, sid, score) for sid, score in fulltext[kind]]
        mode = FULLTEXT
    else:
        words = ranking.query_words(text)
        for kind in kinds:
            fused = ranking.fuse(fulltext[kind], vectors.get(kind, []), limit=depth, words=words)
            hits += [(kind, sid, score) for sid, score in fused]
        mode = SEMANTIC
    hits.sort(key=lambda h: (-h[2], h[0], h[1]))
    return mode, hits


async def search(db: AsyncSession, semantic: SemanticSearch, query: SearchQuery) -> dict[str, Any]:
    text = _query_text(query.q)
    end = query.page * query.limit
    if end > MAX_RESULTS:
        raise BadRequest(
            f"Search returns the best {MAX_RESULTS} results at most: "
            f"page * limit must not exceed {MAX_RESULTS}."
        )
    depth = min(MAX_RESULTS, max(MIN_DEPTH, end))
    mode, hits = await ranked(db, semantic, KINDS[query.type], text, depth, query.use_semantic)
    shown = await _hydrate(db, hits)
    total = len(shown)
    data = shown[(query.page - 1) * query.limit : end]
    return {"mode": mode, **views.paged(data, query.page, query.limit, total)}


async def _hydrate(db: AsyncSession, hits: list[tuple[str, int, float]]) -> list[dict[str, Any]]:
    """Hits as response items (``type``, ``score`` and the item's list view),
    in order, leaving out rows that are no longer visible."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for kind in sorted({h[0] for h in hits}):
        ids = await repo.visible_ids(db, kind, [h[1] for h in hits if h[0] == kind])
        shown = await _views(db, kind, list(ids.values()))
        for sid, item_id in ids.items():
            if item_id in shown:
                rows[(kind, sid)] = shown[item_id]
    out = []
    for kind, sid, score in hits:
        item = rows.get((kind, sid))
        if item is not None:
            out.append({"type": kind, "score": round(score, 4), **item})
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
    hits: list[tuple[str, int, float]] = []
    if nearest is not None:
        for kind in kinds:
            hits += [(kind, sid, s) for sid, s in nearest.get(kind, []) if s >= min_score]
    else:
        for kind in kinds:
            hits += [
                (kind, sid, s)
                for sid, s in await repo.fulltext(db, kind, text, SIMILAR_MAX + 1, any_word=False)
                if s >= repo.ALL_WORDS
            ]
    hits.sort(key=lambda h: (-h[2], h[0], h[1]))
    items = [i for i in await _hydrate(db, hits) if i["id"] != exclude]
    return items[:SIMILAR_MAX]
