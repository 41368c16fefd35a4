"""The address guard of every outbound call whose URL came from a client
(serve_app/kit/outbound.py for the service's calls, actors/webhooks for
webhook deliveries): only public (globally routable, unicast) addresses,
checked when the host is resolved, so the connection goes to a checked
address (no second lookup to rebind). Here, below serve_app, because actors
cannot import serve_app."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

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


def url_problem(url: str, *, allow_loopback: bool = False) -> str | None:
    """Why ``url`` may not be called back (None: its form is fine): https with
    a host, no credentials in it; http only with ``allow_loopback`` (tests and
    local development). A literal address must be allowed; a host name is
    checked when it is resolved (``resolve_problem``)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        return "the URL does not parse"
    allowed = ("https", "http") if allow_loopback else ("https",)
    if parts.scheme not in allowed:
        return "the URL must be https"
    if not host:
        return "the URL has no host"
    if parts.username is not None or parts.password is not None:
        return "the URL may not carry credentials"
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if not address_allowed(str(literal), allow_loopback=allow_loopback):
        return f"{host} is not a public address"
    return None


async def resolve_problem(url: str, *, allow_loopback: bool = False) -> str | None:
    """``url_problem``, then the host's addresses: None when it resolves to at
    least one allowed address (a lookup, no connection)."""
    problem = url_problem(url, allow_loopback=allow_loopback)
    if problem is not None:
        return problem
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return None  # a literal, checked above
    except ValueError:
        pass
    resolver = PublicResolver(allow_loopback=allow_loopback)
    try:
        await resolver.resolve(host, parts.port or 443, socket.AF_UNSPEC)
    except OSError as exc:
        return f"{host} does not resolve to a public address ({exc})"
    finally:
        await resolver.close()
    return None
