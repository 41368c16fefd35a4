"""The real client address behind the proxies we trust, and the key per-IP
rate limits count it under (docs/decisions/uploads-and-exposure.md, "Security: uploads, exposure
and client IP").

Trust model: ``X-Forwarded-For`` is written by whoever sent the request, so it
is believed only when the connection itself (the peer) comes from a proxy we
know sets it honestly: one listed in ``CAIRN_TRUSTED_PROXIES``, or Serve's
HAProxy on this host or another node of the cluster (``local_proxies``, filled
in only when Cairn's own HAProxy launcher is in use). From such a peer the
chain is walked from the right, past addresses in ``CAIRN_TRUSTED_PROXIES``;
the right-most address that is not a trusted proxy is the client. Any other
peer's ``X-Forwarded-For`` is ignored: the peer is the client.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from functools import lru_cache

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Per-IP limits key an IPv6 caller by its /64: one subscriber (one LAN, one
# VM) is usually handed a whole /64, so per-address keys would give a single
# host 2**64 separate windows.
IPV6_SUBJECT_PREFIX = 64


# Cached: the peer is nearly always one of a few proxies (Serve's HAProxy),
# parsed once instead of on every request. Bounded: a stream of new client
# addresses only turns it over.
@lru_cache(maxsize=256)
def _parse(addr: str) -> Address | None:
    addr = addr.strip()
    if addr.startswith("[") and "]" in addr:  # [v6]:port
        addr = addr[1 : addr.index("]")]
    elif addr.count(":") == 1:  # v4:port
        addr = addr.split(":", 1)[0]
    try:
        found = ipaddress.ip_address(addr)
    except ValueError:
        return None
    # ::ffff:a.b.c.d is an IPv4 client on a dual-stack socket.
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped
    return found


def _within(addr: Address, networks: Iterable[Network]) -> bool:
    return any(addr.version == net.version and addr in net for net in networks)


def client_address(
    peer: str | None,
    forwarded_for: str | None,
    trusted: Sequence[Network],
    local_proxies: Sequence[Network] = (),
) -> Address | str:
    """The client's address (see the module docstring for the trust model),
    parsed, or as given when it cannot be parsed (``unknown`` without a peer).

    ``trusted``: the operator's proxies (``CAIRN_TRUSTED_PROXIES``), believed
    as the peer and skipped anywhere in the chain. ``local_proxies``: Serve's
    own HAProxy, believed only as the peer (its one appended entry is the
    address it saw). Unparseable entries end the walk at the last good one.
    """
    found = _parse(peer or "")
    if found is None:
        return peer or "unknown"
    if not forwarded_for or not (_within(found, trusted) or _within(found, local_proxies)):
        # A peer we do not know as a proxy is the client, whatever it claims.
        return found
    chain = [part for part in forwarded_for.split(",") if part.strip()]
    for entry in reversed(chain):
        current = _parse(entry)
        if current is None:
            break
        found = current
        if not _within(current, trusted):
            break
    return found


def client_ip(
    peer: str | None,
    forwarded_for: str | None,
    trusted: Sequence[Network],
    local_proxies: Sequence[Network] = (),
) -> str:
    """The client's address as text (``client_address``)."""
    return str(client_address(peer, forwarded_for, trusted, local_proxies))


def limit_subject(ip: str | Address) -> str:
    """The per-IP rate-limit key of ``ip`` (text, or as ``client_address``
    parsed it): an IPv4 address as it is, an IPv6 address as its /64
    (IPv4-mapped IPv6 as the IPv4 address)."""
    addr = _parse(ip) if isinstance(ip, str) else ip
    if addr is None:
        return f"ip:{ip}"
    if isinstance(addr, ipaddress.IPv6Address):
        net = ipaddress.IPv6Network((addr, IPV6_SUBJECT_PREFIX), strict=False)
        return f"ip:{net}"
    return f"ip:{addr}"


def host_networks() -> list[Network]:
    """Every address of this host's interfaces (loopback included), as /32 or
    /128 networks: where Serve's HAProxy on this node connects from."""
    import psutil

    out: list[Network] = [
        ipaddress.ip_network("127.0.0.0/8"),
        ipaddress.ip_network("::1/128"),
    ]
    for addresses in psutil.net_if_addrs().values():
        for item in addresses:
            addr = _parse(item.address.split("%", 1)[0])
            if addr is not None:
                out.append(ipaddress.ip_network(addr))
    return out
