"""The one way the service calls out to other hosts (X's embed endpoint, a
captcha verifier, an OAuth client's metadata document): only the URL's host,
no redirects, no proxies from the environment, a total timeout and a cap on
the bytes read. A URL that came from a client (``public_only``) may reach
only public addresses: the host's addresses are checked when it is resolved,
and the connection goes to a checked address (no second lookup to rebind)."""

from __future__ import annotations

import ipaddress
import json
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult


class OutboundError(Exception):
    """The remote could not be reached or answered with something unusable."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # parsed JSON, or None when the status is not 2xx


# IPv6 forms that carry an IPv4 address, which a translator or relay on the
# way may reach for them: NAT64's well-known prefix (RFC 6052, the address in
# the last 32 bits), IPv4-compatible (RFC 4291, deprecated) and IPv4-translated
# (RFC 2765) addresses, 6to4 (RFC 3056) and Teredo (RFC 4380; Python decodes
# the last two). The carried address must be public as well.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
# NAT64's local-use prefix (RFC 8215): where the IPv4 address sits depends on
# the prefix length its operator chose, so it cannot be checked; never public.
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses ``ip`` carries (``_NAT64`` and the forms beside it)."""
    found: list[ipaddress.IPv4Address] = []
    if any(ip in net for net in (_NAT64, _IPV4_COMPATIBLE, _IPV4_TRANSLATED)):
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF))
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)  # the server's address and the client's
    return found


def _public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return ip.is_global and not ip.is_multicast


def address_allowed(address: str, *, allow_loopback: bool = False) -> bool:
    """True for a public (globally routable, unicast) address, and for an
    IPv6 address that carries an IPv4 one (NAT64, 6to4, Teredo…) only when
    that one is public too; loopback too when ``allow_loopback`` (tests and
    local development only; never carried inside another address)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if allow_loopback and ip.is_loopback:
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL:
            return False
        if not all(_public(carried) for carried in embedded_ipv4(ip)):
            return False
    return _public(ip)


class PublicResolver(AbstractResolver):
    """Resolves a host to its allowed addresses only (none: an error)."""

    def __init__(self, *, allow_loopback: bool = False) -> None:
        self._inner = aiohttp.ThreadedResolver()
        self._allow_loopback = allow_loopback

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        allowed = [
            r for r in found if address_allowed(r["host"], allow_loopback=self._allow_loopback)
        ]
        if not allowed:
            raise OSError(f"{host} resolves to no public address")
        return allowed

    async def close(self) -> None:
        await self._inner.close()


async def call_json(
    method: str,
    url: str,
    *,
    params: dict[str, str] | None = None,
    form: dict[str, str] | None = None,
    timeout_s: float,
    max_bytes: int,
    public_only: bool = False,
    allow_loopback: bool = False,
) -> Reply:
    """One request to ``url``; a 2xx body must be JSON of at most
    ``max_bytes`` bytes. ``public_only``: ``url`` came from a client, so only
    public addresses may be reached (loopback too with ``allow_loopback``)."""
    host = urlsplit(url).hostname
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    connector: aiohttp.TCPConnector | None = None
    if public_only:
        if not host:
            raise OutboundError("no host")
        try:
            literal = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        # aiohttp connects to an address literal without asking the resolver.
        if literal is not None and not address_allowed(str(literal), allow_loopback=allow_loopback):
            raise OutboundError(f"refused to talk to {host}: not a public address")
        connector = aiohttp.TCPConnector(resolver=PublicResolver(allow_loopback=allow_loopback))
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout, trust_env=False, connector=connector) as session,
            session.request(
                method,
                url,
                params=params,
                data=form,
                allow_redirects=False,
                headers={"Accept": "application/json", "User-Agent": "Cairn/0.1"},
            ) as resp,
        ):
            if resp.url.host != host:  # belt and braces: nothing may move the host
                raise OutboundError(f"refused to talk to {resp.url.host}")
            if not 200 <= resp.status < 300:
                return Reply(resp.status, None)
            if resp.content_length is not None and resp.content_length > max_bytes:
                raise OutboundError(f"reply of {resp.content_length} bytes is over the cap")
            data = bytearray()
            async for chunk in resp.content.iter_chunked(16_384):
                data += chunk
                if len(data) > max_bytes:
                    raise OutboundError(f"reply is over the cap of {max_bytes} bytes")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise OutboundError(f"{type(exc).__name__}: {exc}") from exc
    try:
        return Reply(resp.status, json.loads(bytes(data)))
    except ValueError as exc:
        raise OutboundError("reply is not JSON") from exc
