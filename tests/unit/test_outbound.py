"""The outbound guard (serve_app/kit/outbound.py) refuses IPv6 forms that
carry a private, loopback or link-local IPv4 address (NAT64, 6to4,
IPv4-compatible, IPv4-translated, Teredo) as it refuses the address itself,
before any connection: only the address classification runs here. Any
socket opened, or name looked up on the network, fails the test."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from serve_app.kit.outbound import OutboundError, address_allowed, call_json

# Each form of a private (10.0.0.7), loopback (127.0.0.1), link-local
# (169.254.169.254, cloud metadata) or otherwise non-public IPv4 address.
CARRIED = [
    "64:ff9b::a00:7",  # NAT64, well-known prefix
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b::c0a8:101",  # 192.168.1.1
    "64:ff9b:1::a00:7",  # NAT64, local-use prefix (refused whatever it carries)
    "64:ff9b:1:5db8:d7:e00::",  # local-use /48 carrying a public address: still refused
    "2002:a00:7::1",  # 6to4
    "2002:7f00:1::1",
    "2002:a9fe:a9fe::1",
    "::a00:7",  # IPv4-compatible
    "::7f00:1",
    "::a9fe:a9fe",
    "::ffff:0:a00:7",  # IPv4-translated
    "::ffff:0:7f00:1",
    "2001:0:4136:e378:8000:63bf:f5ff:fffe",  # Teredo, client 10.0.0.1
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    "2001:0:a00:7:8000:63bf:a2ff:28f1",  # Teredo, server 10.0.0.7
]
# The same forms of a public address (93.184.215.14) stay allowed.
PUBLIC_CARRIED = ["64:ff9b::5db8:d70e", "2002:5db8:d70e::1"]


@pytest.mark.parametrize("address", CARRIED)
def test_addresses_carried_in_ipv6_forms_are_checked(address: str) -> None:
    assert not address_allowed(address)
    # Loopback allowed (tests, development) is loopback itself, never carried.
    assert not address_allowed(address, allow_loopback=True)


@pytest.mark.parametrize("address", PUBLIC_CARRIED)
def test_public_addresses_in_those_forms_stay_allowed(address: str) -> None:
    assert address_allowed(address)


class NoNetwork:
    """What the code under test tried to open: sockets and name lookups."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    def refuse(self, what: str) -> OSError:
        self.attempts.append(what)
        return OSError(f"the test allows no {what}")


@pytest.fixture
async def no_network(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[NoNetwork]:
    """Every way out patched to fail and be recorded: a socket made (aiohttp
    makes its own through aiohappyeyeballs), a connection or a lookup by the
    event loop, and the resolver aiohttp would ask."""
    seen = NoNetwork()

    def no_socket(*args: Any, **kwargs: Any) -> socket.socket:
        raise seen.refuse("socket")

    async def no_connection(*args: Any, **kwargs: Any) -> Any:
        raise seen.refuse("connection")

    async def no_lookup(*args: Any, **kwargs: Any) -> Any:
        raise seen.refuse("name lookup")

    loop = asyncio.get_running_loop()
    monkeypatch.setattr(socket, "socket", no_socket)
    monkeypatch.setattr(socket, "create_connection", no_socket)
    monkeypatch.setattr(aiohttp.ThreadedResolver, "resolve", no_lookup)
    monkeypatch.setattr(loop, "create_connection", no_connection)
    monkeypatch.setattr(loop, "sock_connect", no_connection)
    monkeypatch.setattr(loop, "getaddrinfo", no_lookup)
    yield seen


@pytest.mark.parametrize("address", CARRIED)
async def test_a_literal_of_those_forms_is_never_connected_to(
    no_network: NoNetwork, address: str
) -> None:
    with pytest.raises(OutboundError):
        await call_json(
            "GET",
            f"https://[{address}]/client.json",
            timeout_s=1.0,
            max_bytes=1024,
            public_only=True,
            allow_loopback=True,
        )
    assert no_network.attempts == []


@pytest.mark.parametrize("address", CARRIED)
async def test_a_name_resolving_to_those_forms_is_never_connected_to(
    no_network: NoNetwork, monkeypatch: pytest.MonkeyPatch, address: str
) -> None:
    """A public-looking name whose DNS answer (AAAA) is one of the forms: the
    resolver's answer is what is checked, before any connection."""

    async def answer(self: Any, host: str, port: int = 0, family: Any = None) -> list[Any]:
        assert host == "cairn-client.example"
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET6,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    monkeypatch.setattr(aiohttp.ThreadedResolver, "resolve", answer)
    with pytest.raises(OutboundError):
        await call_json(
            "GET",
            "https://cairn-client.example/client.json",
            timeout_s=1.0,
            max_bytes=1024,
            public_only=True,
        )
    assert no_network.attempts == []
