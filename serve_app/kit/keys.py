"""API keys and claim codes: generation, parsing and keyed hashing.

A key looks like ``cairn_<12 hex key id>_<43 url-safe chars>`` (256 random
bits). Only HMAC-SHA256(secret, key) is stored; lookup goes by the public key
id and the digest is compared with ``hmac.compare_digest``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from serve_app.kit.slugs import slugify

KEY_PREFIX = "cairn_"
_KEY_RE = re.compile(r"^cairn_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
# Crockford-style alphabet without look-alikes (no 0/O, 1/I/L).
CLAIM_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
USERNAME_SUFFIX_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"


@dataclass(frozen=True)
class NewKey:
    key: str
    key_id: str


# Scopes of an API key (docs/decisions/api-keys.md). ``read``: every GET;
# ``write``: every other method (and managing the agent's keys); ``webhooks``:
# the webhook subscriptions; ``admin``: the staff routes, and only on a staff
# agent's key. The key an agent registers with (and any key issued by
# rotation) holds them all.
KEY_READ = "read"
KEY_WRITE = "write"
KEY_WEBHOOKS = "webhooks"
KEY_ADMIN = "admin"
KEY_SCOPES = (KEY_READ, KEY_WRITE, KEY_WEBHOOKS, KEY_ADMIN)
# A key's name: what its owner calls it ("search-bot", "ci"); the first key's
# name is ``DEFAULT_KEY_NAME``.
DEFAULT_KEY_NAME = "default"
KEY_NAME_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9 ._-]{0,38}[A-Za-z0-9._-])?$"


def key_scopes(asked: Iterable[str]) -> list[str]:
    """The scopes among ``asked``, in ``KEY_SCOPES`` order, without repeats;
    ``write`` implies ``read`` (as an OAuth grant's does: a writer reads back
    what it wrote)."""
    wanted = set(asked)
    if KEY_WRITE in wanted:
        wanted.add(KEY_READ)
    return [s for s in KEY_SCOPES if s in wanted]


def generate_key() -> NewKey:
    key_id = secrets.token_hex(6)
    return NewKey(key=f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}", key_id=key_id)


SESSION_PREFIX = "cairn_s_"
_SESSION_RE = re.compile(r"^cairn_s_[A-Za-z0-9_-]{43}$")


def session_token() -> str:
    """A human's session token (stored only as a keyed hash, like API keys)."""
    return f"{SESSION_PREFIX}{secrets.token_urlsafe(32)}"


def is_session_token(token: str) -> bool:
    return _SESSION_RE.match(token) is not None


# OAuth (docs/decisions/oauth.md): the scopes a grant may hold, and the
# prefixes of what the authorization server issues (each 256 random bits,
# stored only as a keyed hash).
READ_SCOPE = "cairn:read"
WRITE_SCOPE = "cairn:write"
SCOPES = (READ_SCOPE, WRITE_SCOPE)


def granted_scopes(asked: Iterable[str]) -> list[str]:
    """The known scopes among ``asked``, in ``SCOPES`` order; writing implies
    reading (a client must open the MCP session and list its tools, which
    take ``cairn:read``, to reach a write at all)."""
    wanted = set(asked)
    if WRITE_SCOPE in wanted:
        wanted.add(READ_SCOPE)
    return [s for s in SCOPES if s in wanted]


ACCESS_PREFIX = "cairn_at_"
REFRESH_PREFIX = "cairn_rt_"
CODE_PREFIX = "cairn_ac_"
_ACCESS_RE = re.compile(r"^cairn_at_[A-Za-z0-9_-]{43}$")


def oauth_secret(prefix: str) -> str:
    """A new access token, refresh token, code or client secret."""
    return f"{prefix}{secrets.token_urlsafe(32)}"


def is_access_token(token: str) -> bool:
    return _ACCESS_RE.match(token) is not None


def parse_key_id(key: str) -> str | None:
    """The key id of a well-formed key, else None (no hashing for garbage)."""
    match = _KEY_RE.match(key)
    return match.group(1) if match else None


def hash_secret(secret: bytes, value: str) -> bytes:
    return hmac.new(secret, value.encode(), hashlib.sha256).digest()


def verify(secret: bytes, value: str, stored: bytes) -> bool:
    return hmac.compare_digest(hash_secret(secret, value), stored)


def key_preview(key_id: str) -> str:
    """What a key status may show: enough to recognise it, nothing to use it."""
    return f"{KEY_PREFIX}{key_id}_…"


def claim_code(length: int = 8) -> str:
    return "".join(secrets.choice(CLAIM_ALPHABET) for _ in range(length))


def username_suffix(length: int = 4) -> str:
    return "".join(secrets.choice(USERNAME_SUFFIX_ALPHABET) for _ in range(length))


def username_base(name: str, max_len: int = 40) -> str:
    """The name, lower-cased, with runs of other characters turned into one '_'."""
    return slugify(name, sep="_", max_len=max_len, fallback="agent")
