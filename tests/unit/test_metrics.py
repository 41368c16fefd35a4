"""The metrics catalog (telemetry/metrics.py) and the request labels
(serve_app/http/observe.py) as plain code; the e2e test
(tests/e2e/test_metrics_serve.py) reads them out of a real Prometheus."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.routing import Route

from serve_app.http.observe import door_of, status_class
from telemetry import metrics


def test_names_are_unique_and_label_sets_small() -> None:
    names = [f.name for f in metrics.CATALOG]
    assert len(names) == len(set(names))
    for family in metrics.CATALOG:
        assert family.name.startswith("cairn_")
        assert family.kind in ("counter", "gauge", "histogram")
        # Counters end in _total, as Prometheus names them.
        assert family.name.endswith("_total") == (family.kind == "counter")
        assert len(family.label_names) <= 3
        assert not {"path", "id", "agent", "ip", "key"} & set(family.label_names)
        # Ray's metric constructor refuses anything but ASCII.
        assert family.description.isascii() and family.name.isascii()


def test_a_series_takes_exactly_its_labels() -> None:
    with pytest.raises(ValueError, match="takes labels"):
        metrics.REQUESTS.labels("rest", "/api/health")


def test_outside_ray_recording_is_a_no_op_and_cached() -> None:
    # In a fresh interpreter: this one may hold Ray already (the e2e tests'
    # local cluster), where recording is on.
    script = (
        "from telemetry import metrics\n"
        "bound = metrics.RATE_LIMITED.labels('general')\n"
        "bound.inc()\n"
        "assert bound is metrics.RATE_LIMITED.labels('general')\n"
        "assert not metrics.enabled()\n"
        "print('no-op')\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("CAIRN_METRICS", None)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.strip() == "no-op", done.stderr


def test_switched_off_nothing_records(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(metrics.ENV, "false")
    metrics.configure(None)
    assert not metrics.enabled()


def test_failure_reasons_are_bounded() -> None:
    assert metrics.failure_reason(TimeoutError()) == "timeout"
    assert metrics.failure_reason(RuntimeError("NotReady: the search indexes are loading")) == (
        "not_ready"
    )
    assert metrics.failure_reason(ConnectionError("refused")) == "error"


def _route(path: str, module: str) -> Route:
    async def endpoint() -> None:
        return None

    endpoint.__module__ = module
    return Route(path, endpoint)


def test_the_door_is_read_off_the_route_never_the_raw_path() -> None:
    assert door_of(None) == ("none", "unmatched")
    assert door_of(_route("/api/patterns/{slug}", "serve_app.routers.patterns")) == (
        "rest",
        "/api/patterns/{slug}",
    )
    assert door_of(_route("/mcp", "mcp.server"))[0] == "mcp_transport"
    assert door_of(_route("/docs", "fastapi.applications"))[0] == "docs"
    assert door_of(_route("/", "serve_app.web.pages"))[0] == "page"
    stream = _route("/api/notifications/stream", "serve_app.streams.notifications")
    assert door_of(stream)[0] == "stream"


def test_status_classes() -> None:
    assert [status_class(s) for s in (101, 200, 304, 429, 503)] == [
        "1xx",
        "2xx",
        "3xx",
        "4xx",
        "5xx",
    ]
