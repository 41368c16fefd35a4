"""Issue 24, finding 8 (a) and (d): X-Forwarded-For is believed only from a
proxy we trust, and per-IP limits key IPv6 callers by their /64."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors.ratelimit import Rule
from serve_app.kit.clientip import client_ip, host_networks, limit_subject
from serve_app.launch import bootstrap
from serve_app.settings import Settings
from tests.api.conftest import assert_error

HAPROXY = [ipaddress.ip_network("10.1.0.5/32")]  # Serve's HAProxy, as the replica sees it
LB = [ipaddress.ip_network("192.0.2.0/24")]  # an operator's load balancers


# --- the rule, unit by unit --------------------------------------------------------


def test_forwarded_for_from_an_unknown_peer_is_ignored_even_behind_serve() -> None:
    # Someone reaching a replica's direct port (or Serve's fallback proxy)
    # with a forged header is keyed by their own address.
    assert client_ip("198.51.100.20", "6.6.6.6", [], HAPROXY) == "198.51.100.20"
    assert client_ip("198.51.100.20", "6.6.6.6, 10.1.0.5", LB, HAPROXY) == "198.51.100.20"


def test_serve_haproxy_is_believed_for_its_own_entry_only() -> None:
    # HAProxy appends the address it saw; what the client sent before it is not believed.
    assert client_ip("10.1.0.5", "6.6.6.6, 198.51.100.20", [], HAPROXY) == "198.51.100.20"
    # Our own proxies' addresses are never skipped inside the chain.
    assert client_ip("10.1.0.5", "6.6.6.6, 10.1.0.5", [], HAPROXY) == "10.1.0.5"


def test_operator_proxies_are_walked_to_the_rightmost_untrusted_hop() -> None:
    assert client_ip("10.1.0.5", "6.6.6.6, 198.51.100.20, 192.0.2.9", LB, HAPROXY) == (
        "198.51.100.20"
    )
    assert client_ip("192.0.2.1", "198.51.100.20, 192.0.2.7", LB) == "198.51.100.20"
    assert client_ip("192.0.2.1", "junk, 192.0.2.7", LB) == "192.0.2.7"


def test_ipv4_mapped_addresses_are_ipv4() -> None:
    assert client_ip("::ffff:198.51.100.20", None, []) == "198.51.100.20"
    assert client_ip("::ffff:192.0.2.1", "203.0.113.9", LB) == "203.0.113.9"


def test_ipv6_callers_are_limited_per_64() -> None:
    assert limit_subject("2001:db8:1:2::1") == limit_subject("2001:db8:1:2:ffff:ffff:ffff:ffff")
    assert limit_subject("2001:db8:1:2::1") == "ip:2001:db8:1:2::/64"
    assert limit_subject("2001:db8:1:2::1") != limit_subject("2001:db8:1:3::1")
    assert limit_subject("::ffff:203.0.113.7") == limit_subject("203.0.113.7") == "ip:203.0.113.7"
    assert limit_subject("203.0.113.7") != limit_subject("203.0.113.8")


def test_host_networks_cover_loopback() -> None:
    nets = host_networks()
    assert any(ipaddress.ip_address("127.0.0.1") in n for n in nets)


def test_haproxy_mode_refuses_to_start_without_the_launcher(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without cairn-haproxy, Ray's HAProxy forwards a client's own header
    untouched: the service must not start that way."""
    monkeypatch.setattr(bootstrap.sys, "executable", str(tmp_path / "bin" / "python"))
    settings = Settings(state_dir=tmp_path / "state", serve_proxy="haproxy")
    with pytest.raises(RuntimeError, match="cairn-haproxy"):
        bootstrap.ray_env(settings)
    assert "RAY_SERVE_ENABLE_HA_PROXY" not in bootstrap.ray_env(
        Settings(state_dir=tmp_path / "state", serve_proxy="default")
    )
    assert bootstrap.is_shim("/opt/cairn/.venv/bin/cairn-haproxy")
    assert not bootstrap.is_shim("/usr/sbin/haproxy") and not bootstrap.is_shim(None)


# --- through the app --------------------------------------------------------------------


@pytest.fixture
def behind_serve(client: httpx.AsyncClient) -> Iterator[Any]:
    """The app as it runs behind Serve's HAProxy (HAProxy connects from 10.1.0.5)."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.local_proxies
    ctx.local_proxies = HAPROXY
    yield ctx
    ctx.local_proxies = saved


@asynccontextmanager
async def from_peer(client: httpx.AsyncClient, peer: str) -> AsyncIterator[httpx.AsyncClient]:
    app = client._transport.app  # type: ignore[attr-defined]
    transport = httpx.ASGITransport(app=app, client=(peer, 40001))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


async def register(c: httpx.AsyncClient, forwarded: str | None = None) -> httpx.Response:
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    return await c.post("/api/agents/register", json={"name": "ip test"}, headers=headers)


async def test_spoofed_forwarded_for_from_an_untrusted_peer_counts_the_peer(
    client: httpx.AsyncClient, behind_serve: Any
) -> None:
    async with from_peer(client, "198.51.100.20") as direct:
        for i in range(10):
            assert (await register(direct, f"203.0.113.{i}")).status_code == 201
        assert_error(await register(direct, "203.0.113.99"), 429, "rate_limited")
    # Through HAProxy, the address it appended is the client; a forged part
    # before it changes nothing.
    async with from_peer(client, "10.1.0.5") as haproxy:
        for i in range(10):
            assert (await register(haproxy, f"6.6.6.{i}, 203.0.113.50")).status_code == 201
        assert_error(await register(haproxy, "7.7.7.7, 203.0.113.50"), 429, "rate_limited")
        assert (await register(haproxy, "203.0.113.51")).status_code == 201


async def test_ipv6_addresses_of_one_64_share_a_window(client: httpx.AsyncClient) -> None:
    for i in range(10):
        async with from_peer(client, f"2001:db8:1:2::{i + 1:x}") as c:
            assert (await register(c)).status_code == 201
    async with from_peer(client, "2001:db8:1:2:dead:beef:0:1") as c:
        assert_error(await register(c), 429, "rate_limited")
    async with from_peer(client, "2001:db8:1:3::1") as c:
        assert (await register(c)).status_code == 201
    # An IPv4-mapped peer is the IPv4 caller.
    for _ in range(10):
        async with from_peer(client, "::ffff:198.51.100.44") as c:
            assert (await register(c)).status_code == 201
    async with from_peer(client, "198.51.100.44") as c:
        assert_error(await register(c), 429, "rate_limited")


async def test_anonymous_reads_are_keyed_per_64_too(client: httpx.AsyncClient) -> None:
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    ctx.rules = {**saved, "anon_read": Rule("anon_read", 3, 60)}
    try:
        for i in range(3):
            async with from_peer(client, f"2001:db8:9:9::{i + 1:x}") as c:
                assert (await c.get("/api/categories")).status_code == 200
        async with from_peer(client, "2001:db8:9:9:ffff::1") as c:
            assert_error(await c.get("/api/patterns"), 429, "rate_limited")
    finally:
        ctx.rules = saved
