"""http_bench's plain uvicorn: ``create_app`` in ``--workers`` processes, each
with the in-process rate limiter and trending counter (``--redis``: one global
limit in Redis; ``--semantic``: the model and a copy of the vector index).

    python -m benchmarks.uvicorn_app --host 127.0.0.1 --port 8101 --workers 2
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING

import uvicorn
from fastapi import FastAPI

from serve_app.app import create_app
from serve_app.launch.bootstrap import prepare
from serve_app.settings import get_settings

if TYPE_CHECKING:
    from serve_app.runtime.semantic import SearchFactory, SemanticSearch

# Set by main() for the worker processes (uvicorn spawns them).
_SEMANTIC_ENV = "CAIRN_BENCH_UVICORN_SEMANTIC"
_REDIS_ENV = "CAIRN_BENCH_UVICORN_REDIS"


def build() -> FastAPI:
    """The app factory each worker calls (``uvicorn --factory``)."""
    settings = get_settings()
    assert settings.database_url, "main() puts the prepared database URL in the environment"
    secret = settings.secret_bytes()
    semantic: SemanticSearch | SearchFactory | None = None
    if os.environ.get(_SEMANTIC_ENV) == "1":
        from embeddings.encoder import Encoder
        from embeddings.querycache import DEFAULT_SIZE
        from serve_app.runtime.semantic import LocalSearch
        from storage.db import make_engine, make_sessionmaker

        engine = make_engine(settings.database_url, pool_size=3, max_overflow=2)
        copies = settings.search_replica_vectors
        config = settings.indexer_config(settings.database_url)
        encoder = Encoder(settings.embedding_model, "cpu")
        # As the deployments: the copy keeps the query vectors, or else the
        # index (the VectorIndex's cache).
        cache = 0 if copies else DEFAULT_SIZE
        local = LocalSearch(config, encoder, make_sessionmaker(engine), engine, query_cache=cache)
        semantic = local
        if copies:
            # As each Api replica: a copy of the index following the stored
            # vectors, the encoder in process for queries.
            from serve_app.runtime.index_copies.vectors import replica_vectors

            semantic = replica_vectors(settings, local.queries.get, local)
    limiter = None
    if os.environ.get(_REDIS_ENV):
        from benchmarks.serving.redis_limiter import RedisRateLimiter

        limiter = RedisRateLimiter(os.environ[_REDIS_ENV])
    url = settings.database_url
    return create_app(settings, database_url=url, secret=secret, semantic=semantic, limiter=limiter)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=8101)
    add("--workers", type=int, default=0, help="uvicorn workers (0: CAIRN_INGRESS_REPLICAS)")
    add("--semantic", action="store_true", help="semantic search in process (model per worker)")
    add("--redis", default="", help="a limits storage URI (async+redis://…): one global limit")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.WARNING)
    settings = get_settings()
    workers = args.workers or settings.ingress_replicas
    prepared = prepare(settings)
    # What the workers build the app from: the same settings, the resolved
    # database and the secret (the bytes Serve replicas use).
    os.environ["CAIRN_DATABASE_URL"] = prepared.database_url
    os.environ["CAIRN_SECRET_KEY"] = prepared.secret_key
    os.environ[_SEMANTIC_ENV] = "1" if args.semantic else "0"
    os.environ[_REDIS_ENV] = args.redis
    print(
        f"uvicorn_app: serving on http://{args.host}:{args.port} with {workers} worker(s)",
        flush=True,
    )
    uvicorn.run("benchmarks.uvicorn_app:build", factory=True, host=args.host, port=args.port,
                workers=workers, log_level="warning", access_log=False,
                proxy_headers=False)  # fmt: skip


if __name__ == "__main__":
    main()
