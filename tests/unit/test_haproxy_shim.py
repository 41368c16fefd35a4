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
