"""The config edits cairn-haproxy makes before starting HAProxy."""

from __future__ import annotations

from serve_app.haproxy_shim import patch_config

GENERATED = """global
    maxconn 4096
defaults
    mode http
    timeout connect 5s
frontend prometheus
    bind :19101
    mode http
frontend http_frontend
    bind *:8000
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
