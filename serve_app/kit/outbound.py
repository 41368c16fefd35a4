"""The one way the service calls out to other hosts (X's embed endpoint, a
captcha verifier, an OAuth client's metadata document): only the URL's host,
no redirects, no proxies from the environment, a total timeout and a cap on
the bytes read. A URL that came from a client (``public_only``) may reach
only public addresses: the host's addresses are checked when it is resolved,
and the connection goes to a checked address (no second lookup to rebind)."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from actors.netguard import PublicResolver, address_allowed, embedded_ipv4

__all__ = [
    "OutboundError",
    "PublicResolver",
    "Reply",
    "address_allowed",
    "call_json",
    "embedded_ipv4",
]


class OutboundError(Exception):
    """The remote could not be reached or answered with something unusable."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # parsed JSON, or None when the status is not 2xx


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
