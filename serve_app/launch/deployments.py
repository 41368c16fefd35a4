"""The Serve graph: the Api ingress deployment, the Embedder and VectorIndex
deployments it searches with, and the builder that binds them.

``build_app`` is what configs/serve.yaml imports; ``cairn run`` uses
``build_application`` after its own preparation.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from ray import serve
from ray.serve import Application
from ray.serve.schema import LoggingConfig

from replicas.loopback import bind_replica_grpc_to_node
from serve_app.kit.clientip import Network, host_networks
from serve_app.launch.bootstrap import Prepared, is_shim, prepare, worker_env
from serve_app.settings import Settings, get_settings

if TYPE_CHECKING:
    from serve_app.runtime.semantic import SearchFactory, SemanticSearch

log = logging.getLogger("cairn.deployments")


def replica_app(runtime: dict[str, str], index: Any = None, embedder: Any = None) -> FastAPI:
    """Runs on each replica: the app is built there, never pickled.

    ``runtime`` holds the deploying process's CAIRN_* settings with the
    resolved database URL, secret and state folder; it travels as the
    deployment's bind argument, which a Serve config file cannot override
    (its ``ray_actor_options`` replace a builder's ``runtime_env``)."""
    from ray.serve._private import constants

    from serve_app.app import create_app
    from serve_app.runtime.dispatch import RayDispatch, dispatch_config
    from serve_app.runtime.ratelimit import RayRateLimiter
    from serve_app.runtime.trending import RayTrending
    from serve_app.runtime.webhooks import start_actor

    os.environ.update(runtime)
    get_settings.cache_clear()
    settings = get_settings()
    if not settings.database_url:
        raise RuntimeError("the Api deployment needs CAIRN_DATABASE_URL; deploy it with build_app")
    secret = settings.secret_bytes()
    # The webhook deliverer reads the outbox on its own (a short poll); the
    # replicas only make sure it runs.
    start_actor(settings, settings.database_url)
    return create_app(
        settings,
        database_url=settings.database_url,
        secret=secret,
        limiter=RayRateLimiter(settings.ratelimit_shards, settings.ingress_replicas),
        trending=RayTrending(settings.database_url),
        dispatch=RayDispatch(dispatch_config(settings, settings.database_url, secret)),
        # Serve's HAProxy appends the client address to X-Forwarded-For.
        local_proxies=serve_proxies(constants.RAY_SERVE_ENABLE_HA_PROXY),
        semantic=semantic_search(settings, index, embedder),
    )


def semantic_search(
    settings: Settings, index: Any, embedder: Any = None
) -> SemanticSearch | SearchFactory | None:
    """What an Api replica searches by meaning with: a copy of the VectorIndex's
    indexes in the replica (``CAIRN_SEARCH_REPLICA_VECTORS``), which asks the
    Embedder for a query's vector (one handle call; the Embedder keeps the
    recent queries of every replica), or the VectorIndex itself, which embeds
    the query (≤ search_query_timeout_s) then searches."""
    from serve_app.runtime.semantic import RaySearch

    if index is None:
        return None
    remote = RaySearch(index, timeout_s=settings.search_query_timeout_s + 1.0)
    if not settings.search_replica_vectors:
        return remote
    if embedder is None:
        raise ValueError("the Api replicas' copies of the index need the Embedder's handle")
    from embeddings.deployments import EmbedderQueries
    from serve_app.runtime.index_copies.vectors import replica_vectors

    # One handle call a new query, where asking through the VectorIndex made
    # two (docs/decisions/deployment-and-operations.md, "Serve path
    # performance", "Queries").
    queries = EmbedderQueries(embedder, timeout_s=settings.search_query_timeout_s + 1.0)
    return replica_vectors(settings, queries.embed_query, remote)


def serve_proxies(haproxy: bool) -> list[Network]:
    """Where Serve's own HAProxy connects to this replica from: this host and
    the cluster's nodes. Empty (nothing believed beyond CAIRN_TRUSTED_PROXIES)
    unless HAProxy runs through ``cairn-haproxy``: Ray's stock template passes
    a client's own X-Forwarded-For through untouched (docs/decisions/uploads-and-exposure.md,
    "Security: uploads, exposure and client IP")."""
    if not haproxy:
        return []
    if not is_shim(os.environ.get("RAY_SERVE_HAPROXY_BINARY_PATH")):
        log.error(
            "HAProxy runs without cairn-haproxy: X-Forwarded-For is ignored unless "
            "the peer is in CAIRN_TRUSTED_PROXIES (per-IP limits see HAProxy's address)"
        )
        return []
    import ray

    networks = host_networks()
    for node in ray.nodes():
        if node.get("Alive") and node.get("NodeManagerAddress"):
            networks.append(ipaddress.ip_network(node["NodeManagerAddress"]))
    return networks


@serve.deployment(name="Api")
@serve.ingress()
class Api:
    """The HTTP ingress: the whole FastAPI app."""

    def __init__(self, runtime: dict[str, str], index: Any = None, embedder: Any = None) -> None:
        bind_replica_grpc_to_node()
        self._runtime = runtime
        self._index = index
        self._embedder = embedder

    def __serve_build_asgi_app__(self) -> FastAPI:
        return replica_app(self._runtime, self._index, self._embedder)


def ingress_slots(settings: Settings) -> int:
    """Serve's ``max_ongoing_requests`` for an Api replica: the requests it
    runs at once plus the notification streams it may hold open."""
    return settings.ingress_max_ongoing_requests + settings.stream_max_per_replica


def build_application(settings: Settings, prepared: Prepared) -> Application:
    runtime = worker_env(settings, prepared)
    index = embedder = None
    if settings.search_semantic:
        from embeddings.autoscaling import QUEUED_POLICY
        from embeddings.deployments import Embedder, VectorIndex

        logging_config = LoggingConfig(enable_access_log=False)
        embedder = Embedder.options(  # type: ignore[attr-defined]
            autoscaling_config={
                "min_replicas": settings.embedder_min_replicas,
                "initial_replicas": max(1, settings.embedder_min_replicas),
                "max_replicas": settings.embedder_max_replicas,
                "target_ongoing_requests": settings.embedding_max_batch,
                # Queries held, not calls (embeddings/autoscaling.py).
                "policy": {"policy_function": QUEUED_POLICY},
            },
            ray_actor_options={
                "num_cpus": settings.embedder_num_cpus,
                "num_gpus": settings.embedder_num_gpus,
            },
            logging_config=logging_config,
        ).bind(settings.embedder_config(runtime["CAIRN_DATABASE_URL"]))
        index = VectorIndex.options(  # type: ignore[attr-defined]
            ray_actor_options={"num_cpus": 0.1}, logging_config=logging_config
        ).bind(settings.indexer_config(runtime["CAIRN_DATABASE_URL"]), embedder)
    spread = (
        {"max_replicas_per_node": settings.ingress_max_replicas_per_node}
        if settings.ingress_max_replicas_per_node
        else {}
    )
    return Api.options(  # type: ignore[attr-defined]
        num_replicas=settings.ingress_replicas,
        # An open notification stream holds one of Serve's ongoing-request
        # slots for as long as it lives: the streams get their own slots on
        # top of the ones ordinary requests have (docs/decisions/notifications-and-streams.md,
        # "Notification stream"), so idle streams never starve the API.
        max_ongoing_requests=ingress_slots(settings),
        ray_actor_options={"num_cpus": settings.ingress_num_cpus},
        # Without the access log, Serve's logger at WARNING: the replica's
        # per-request access-log call then returns before building a record
        # that its filter would drop.
        logging_config=LoggingConfig(
            enable_access_log=settings.access_log,
            log_level="INFO" if settings.access_log else "WARNING",
        ),
        **spread,
    ).bind(runtime, index, embedder)


def build_app(args: dict[str, Any]) -> Application:
    """Application builder for `serve run configs/serve.yaml` / `serve deploy`.

    Serve may call it in a short-lived Ray task, so an embedded Postgres it
    starts is left running afterwards (`cairn db stop` stops it)."""
    settings = get_settings()
    prepared = prepare(settings, migrate=bool(args.get("migrate", True)), keep_db_running=True)
    return build_application(settings, prepared)
