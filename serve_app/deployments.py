"""The Serve graph: the Api ingress deployment and its builder.

``build_app`` is what configs/serve.yaml imports; ``cairn run`` uses
``build_application`` after its own preparation.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.serve import Application
from ray.serve.schema import LoggingConfig

from serve_app.bootstrap import Prepared, prepare, worker_env
from serve_app.settings import Settings, get_settings


def replica_app(runtime: dict[str, str]) -> FastAPI:
    """Runs on each replica: the app is built there, never pickled.

    ``runtime`` holds the deploying process's CAIRN_* settings with the
    resolved database URL, secret and state folder; it travels as the
    deployment's bind argument, which a Serve config file cannot override
    (its ``ray_actor_options`` replace a builder's ``runtime_env``)."""
    from ray.serve._private import constants

    from serve_app.app import create_app
    from serve_app.dispatch import RayDispatch, dispatch_config
    from serve_app.ratelimit import RayRateLimiter
    from serve_app.trending import RayTrending

    os.environ.update(runtime)
    get_settings.cache_clear()
    settings = get_settings()
    if not settings.database_url:
        raise RuntimeError("the Api deployment needs CAIRN_DATABASE_URL; deploy it with build_app")
    return create_app(
        settings,
        database_url=settings.database_url,
        secret=settings.secret_bytes(),
        limiter=RayRateLimiter(settings.ratelimit_shards),
        trending=RayTrending(settings.database_url),
        dispatch=RayDispatch(dispatch_config(settings, settings.database_url)),
        # Serve's HAProxy appends the client address to X-Forwarded-For.
        implicit_proxy_hops=1 if constants.RAY_SERVE_ENABLE_HA_PROXY else 0,
    )


@serve.deployment(name="Api")
@serve.ingress()
class Api:
    """The HTTP ingress: the whole FastAPI app."""

    def __init__(self, runtime: dict[str, str]) -> None:
        self._runtime = runtime

    def __serve_build_asgi_app__(self) -> FastAPI:
        return replica_app(self._runtime)


def build_application(settings: Settings, prepared: Prepared) -> Application:
    return Api.options(  # type: ignore[attr-defined]
        num_replicas=settings.ingress_replicas,
        max_ongoing_requests=settings.ingress_max_ongoing_requests,
        ray_actor_options={"num_cpus": settings.ingress_num_cpus},
        logging_config=LoggingConfig(enable_access_log=settings.access_log),
    ).bind(worker_env(settings, prepared))


def build_app(args: dict[str, Any]) -> Application:
    """Application builder for `serve run configs/serve.yaml` / `serve deploy`.

    Serve may call it in a short-lived Ray task, so an embedded Postgres it
    starts is left running afterwards (`cairn db stop` stops it)."""
    settings = get_settings()
    prepared = prepare(settings, migrate=bool(args.get("migrate", True)), keep_db_running=True)
    return build_application(settings, prepared)
