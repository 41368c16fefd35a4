"""The Serve graph: the Api ingress deployment and its builder.

``build_app`` is what configs/serve.yaml imports; ``cairn run`` uses
``build_application`` after its own preparation.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.serve import Application
from ray.serve.schema import LoggingConfig

from serve_app.bootstrap import Prepared, prepare, worker_env
from serve_app.settings import Settings, get_settings


def replica_app() -> FastAPI:
    """Runs on each replica: the app is built there, never pickled."""
    from ray.serve._private import constants

    from serve_app.app import create_app
    from serve_app.ratelimit import RayRateLimiter

    settings = get_settings()
    assert settings.database_url, "replicas get CAIRN_DATABASE_URL from the builder"
    return create_app(
        settings,
        database_url=settings.database_url,
        secret=settings.secret_bytes(),
        limiter=RayRateLimiter(settings.ratelimit_shards),
        # Serve's HAProxy appends the client address to X-Forwarded-For.
        implicit_proxy_hops=1 if constants.RAY_SERVE_ENABLE_HA_PROXY else 0,
    )


@serve.deployment(name="Api")
@serve.ingress(replica_app)
class Api:
    """The HTTP ingress: the whole FastAPI app."""


def build_application(settings: Settings, prepared: Prepared) -> Application:
    return Api.options(  # type: ignore[attr-defined]
        num_replicas=settings.ingress_replicas,
        max_ongoing_requests=settings.ingress_max_ongoing_requests,
        ray_actor_options={
            "num_cpus": settings.ingress_num_cpus,
            "runtime_env": {"env_vars": worker_env(settings, prepared)},
        },
        logging_config=LoggingConfig(enable_access_log=settings.access_log),
    ).bind()


def build_app(args: dict[str, Any]) -> Application:
    """Application builder for `serve run configs/serve.yaml` / `serve deploy`."""
    settings = get_settings()
    return build_application(settings, prepare(settings, migrate=bool(args.get("migrate", True))))
