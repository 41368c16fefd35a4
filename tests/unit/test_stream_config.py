"""The stream's settings agree with Serve's: its slots are added to the Api
replica's, and its heartbeat is well inside the proxy's idle timeouts."""

from __future__ import annotations

from pathlib import Path

import yaml
from ray.serve._private import constants

from serve_app.launch.deployments import ingress_slots
from serve_app.settings import Settings

SERVE_YAML = Path(__file__).resolve().parents[2] / "configs" / "serve.yaml"


def test_serve_yaml_gives_the_api_the_same_slots_as_cairn_run() -> None:
    config = yaml.safe_load(SERVE_YAML.read_text())
    (app,) = config["applications"]
    api = next(d for d in app["deployments"] if d["name"] == "Api")
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    assert api["max_ongoing_requests"] == ingress_slots(defaults) == 128 + 1000


def test_streams_get_slots_on_top_of_requests() -> None:
    settings = Settings(ingress_max_ongoing_requests=64, stream_max_per_replica=10)
    assert ingress_slots(settings) == 74


def test_heartbeat_is_well_inside_haproxy_idle_timeouts() -> None:
    heartbeat = Settings().stream_heartbeat_s
    # Ray's HAProxy: `timeout client` (idle client), and no `timeout server`
    # unless an operator sets one; keep-alive only applies between requests.
    assert heartbeat * 4 <= constants.RAY_SERVE_HAPROXY_TIMEOUT_CLIENT_S
    server = constants.RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S
    assert server is None or heartbeat * 2 <= server
    # The upper bound of the setting itself stays inside the client timeout.
    top = Settings.model_fields["stream_heartbeat_s"].metadata
    assert any(getattr(m, "le", None) == 600 for m in top)
