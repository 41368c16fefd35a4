"""The real client address behind Serve's proxy and any trusted proxies."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _parse(addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    addr = addr.strip()
    if addr.startswith("[") and "]" in addr:  # [v6]:port
        addr = addr[1 : addr.index("]")]
    elif addr.count(":") == 1:  # v4:port
        addr = addr.split(":", 1)[0]
    try:
        return ipaddress.ip_address(addr)
    except ValueError:
        return None


def client_ip(
    peer: str | None,
    forwarded_for: str | None,
    trusted: Sequence[Network],
    implicit_hops: int = 0,
) -> str:
    """Walk X-Forwarded-For from the right, skipping our own proxy hops.

    ``implicit_hops`` counts proxies we run ourselves (Serve's HAProxy appends
    the address it saw), which are believed without being listed. Beyond them
    an address is skipped only while it lies in ``trusted``; the first other
    address is the client. Unparseable entries end the walk.
    """
    chain: list[str] = []
    if forwarded_for:
        chain = [part for part in forwarded_for.split(",") if part.strip()]
    chain.append(peer or "")
    index = len(chain) - 1
    hops = implicit_hops
    while index > 0:
        current = _parse(chain[index])
        if current is None:
            break
        if hops > 0:
            hops -= 1
        elif not any(current in net for net in trusted):
            break
        index -= 1
        if _parse(chain[index]) is None:
            index += 1
            break
    found = _parse(chain[index])
    return str(found) if found is not None else (peer or "unknown")
