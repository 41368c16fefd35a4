"""The one way the service calls out to other hosts (X's embed endpoint, a
captcha verifier): only the configured URL's host, no redirects, no proxies
from the environment, a total timeout and a cap on the bytes read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp


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
) -> Reply:
    """One request to ``url`` (a configured URL, never one built from input);
    a 2xx body must be JSON of at most ``max_bytes`` bytes."""
    host = urlsplit(url).hostname
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout, trust_env=False) as session,
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
