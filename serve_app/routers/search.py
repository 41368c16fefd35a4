"""GET /api/search: patterns and agents by meaning (hybrid) or by words (full text)."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import Depends, Query, Response

from serve_app.http import admission
from serve_app.http.contract import api_router
from serve_app.http.deps import Ctx, MaybeCaller, ReadDb, ip_limit
from serve_app.schemas.search import SearchOut, SearchParams
from serve_app.services import search as service

router = api_router(prefix="/api/search", tags=["search"])


# A sent key is checked (search answers its author with their own latest
# writes), but only the per-address rule counts, as for anonymous callers.
SEARCH = admission.Policy("optional", anonymous=None, counted=False)


@router.get(
    "",
    dependencies=[admission.declare(SEARCH), Depends(ip_limit("search"))],
    response_model=SearchOut,
)
async def search(
    db: ReadDb, ctx: Ctx, caller: MaybeCaller, params: Annotated[SearchParams, Query()]
) -> Response:
    """Search patterns and agents (60 per minute per IP). Semantic mode fuses
    BM25 and embedding rankings; full-text mode (BM25) runs when
    `use_semantic=false` or the embedder is not available. Each hit carries
    its `type`, `score` and the `components` it was fused from; `mode` says
    which ran."""
    # The service's answer is sent as it is, the bytes FastAPI would send after
    # checking it against SearchOut (the contract sends what the service set):
    # the check cost about 0.4 ms of a search's CPU. The tests hold every
    # search answer to SearchOut (tests/api/test_search.py).
    body = await service.search(db, ctx.search, params, ctx.lexical, fresh=caller is not None)
    return Response(orjson.dumps(body), media_type="application/json")
