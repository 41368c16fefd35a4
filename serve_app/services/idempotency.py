"""Idempotency keys: the rule, for every door (REST routes now, MCP tools next).

A creating request sent with a key runs once per (caller, key): its first
successful answer is stored in the request's own transaction, so the key and
the object it created commit together or not at all, and a retry gets that
answer again instead of creating a second object. ``KeyedCall`` is the whole
rule over (session, scope, key, request hash); serve_app/http/idempotency.py
adapts it to HTTP (docs/decisions/http-and-contract.md, "Contract: idempotency keys").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.errors import AppError, BadRequest, Conflict
from storage.models import IdempotencyKey
from storage.repositories import idempotency as repo

# 1 to 255 printable ASCII characters (space to tilde); the value is opaque.
KEY_PATTERN = r"^[ -~]{1,255}$"
KEY_MAX_LENGTH = 255

_NONCE_BYTES = 12

# A key that alone guards a stored answer (an anonymous registration's: a new
# API key or session) must be unguessable: a UUID version 4 (canonical
# 8-4-4-4-12, any case, or its 32 hex digits) with at least 8 distinct digits
# among its 30 random ones, or a token of at least 32 URL-safe characters
# with at least 10 distinct ones (docs/decisions/admission.md, "Security: admission
# fixes (issue 30)").
_UUID_LAYOUT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_UUID4_HEX = re.compile(r"[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}")
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,}")
_UUID4_MIN_DISTINCT = 8
_TOKEN_MIN_DISTINCT = 10


class KeyInProgress(Conflict):
    error = "idempotency_key_in_progress"


class KeyReused(AppError):
    """The IETF Idempotency-Key draft's answer to a key sent again with another request."""

    status = 422
    error = "idempotency_key_reused"


class WeakIdempotencyKey(BadRequest):
    error = "weak_idempotency_key"


def is_strong_key(key: str) -> bool:
    """Whether ``key`` carries about 128 random bits or more (see above)."""
    lowered = key.lower()
    if _UUID_LAYOUT.fullmatch(lowered):
        digits = lowered.replace("-", "")
        if not _UUID4_HEX.fullmatch(digits):
            return False  # another version (time, name or node based) or variant
        return _uuid4_random_enough(digits)
    if _UUID4_HEX.fullmatch(lowered):
        return _uuid4_random_enough(lowered)
    return bool(_TOKEN.fullmatch(key)) and len(set(key)) >= _TOKEN_MIN_DISTINCT


def _uuid4_random_enough(digits: str) -> bool:
    # Every digit but the version (13th) and the variant (17th) is random.
    random = digits[:12] + digits[13:16] + digits[17:]
    return len(set(random)) >= _UUID4_MIN_DISTINCT


def require_strong_key(key: str) -> None:
    """400 ``weak_idempotency_key`` unless ``key`` is unguessable: for a
    request whose stored answer the key alone guards."""
    if not is_strong_key(key):
        raise WeakIdempotencyKey(
            "A request without an API key (a registration) needs an unguessable "
            "Idempotency-Key, since the key alone guards its stored answer: send a "
            "fresh random UUID (version 4) per new request, e.g. "
            "5f0c4b1e-8a4e-4c1d-9a57-0d3c2b8f6e21, or at least 32 random characters "
            "of A-Z, a-z, 0-9, '_' and '-'."
        )


@dataclass(frozen=True)
class Answer:
    """A stored answer: what the first request sent back."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def _digest(*parts: bytes) -> bytes:
    # Length-prefixed, so no two different part lists hash alike.
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


def body_digest(*parts: bytes) -> bytes:
    """The digest of a request body given as its meaningful parts."""
    return _digest(*parts)


def request_hash(method: str, target: str, body: bytes) -> bytes:
    """What makes two requests "the same": method, path (with its query) and
    the body's digest (``body_digest``)."""
    return _digest(method.upper().encode(), target.encode(), body)


def _derive(secret: bytes, label: bytes, scope: str, key: str) -> bytes:
    return hmac.new(
        secret, label + b"\0" + scope.encode() + b"\0" + key.encode(), "sha256"
    ).digest()


@dataclass
class KeyedCall:
    """One request under an idempotency key, in one transaction: ``begin``
    before the work, ``finish`` after it succeeded, the commit after that.

    ``scope`` names the caller (``agent:<id>``), or for an anonymous
    registration the route (``anon:<path>``: the key, which must then pass
    ``require_strong_key``, is the only proof); ``secret`` is the server's
    HMAC key."""

    session: AsyncSession
    secret: bytes
    scope: str
    key: str
    request_hash: bytes
    ttl: timedelta
    _key_hash: bytes = field(init=False, repr=False)
    _cipher_key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # The row is found by a keyed hash and the answer is encrypted under a
        # key derived from the client's own key: answers carry new API keys
        # and session tokens, which Cairn otherwise never stores in clear.
        self._key_hash = _derive(self.secret, b"idempotency-key", self.scope, self.key)
        self._cipher_key = _derive(self.secret, b"idempotency-answer", self.scope, self.key)

    async def begin(self, now: datetime) -> Answer | None:
        """Hold the key until the transaction ends and look it up: the stored
        answer to replay, or None when the work should run (first use, or the
        earlier use expired). 409 while another copy runs, 422 when the key
        was used with a different request."""
        if not await repo.try_lock(self.session, self._key_hash):
            raise KeyInProgress(
                "A request with this Idempotency-Key is still being processed; "
                "retry once it has finished to get its answer."
            )
        row = await repo.live(self.session, self._key_hash, now)
        if row is None:
            return None
        if not hmac.compare_digest(row.request_hash, self.request_hash):
            raise KeyReused(
                "This Idempotency-Key was already used with a different request "
                "(method, path or body); use a new key for a new request."
            )
        return self._open(row)

    async def finish(self, answer: Answer, now: datetime) -> None:
        """Store a successful (2xx) answer in the same transaction as the work
        it reports; any other answer is not stored, so a retry runs again.
        Also removes a batch of expired keys."""
        if not 200 <= answer.status < 300:
            return
        await repo.sweep(self.session, now)
        await repo.save(
            self.session,
            IdempotencyKey(
                key_hash=self._key_hash,
                request_hash=self.request_hash,
                status_code=answer.status,
                response=self._seal(answer),
                created_at=now,
                expires_at=now + self.ttl,
            ),
        )

    def _aad(self, status: int) -> bytes:
        return self.request_hash + status.to_bytes(2, "big")

    def _seal(self, answer: Answer) -> bytes:
        # JSON escapes newlines, so the first b"\n" ends the headers.
        plain = json.dumps(answer.headers).encode() + b"\n" + answer.body
        nonce = os.urandom(_NONCE_BYTES)
        sealed = AESGCM(self._cipher_key).encrypt(nonce, plain, self._aad(answer.status))
        return nonce + sealed

    def _open(self, row: IdempotencyKey) -> Answer:
        nonce, sealed = row.response[:_NONCE_BYTES], row.response[_NONCE_BYTES:]
        try:
            plain = AESGCM(self._cipher_key).decrypt(nonce, sealed, self._aad(row.status_code))
        except InvalidTag as exc:  # the server secret changed since it was stored
            raise AppError("The stored answer to this Idempotency-Key cannot be read.") from exc
        head, _, body = plain.partition(b"\n")
        headers = [(str(name), str(value)) for name, value in json.loads(head)]
        return Answer(status=row.status_code, headers=headers, body=body)
