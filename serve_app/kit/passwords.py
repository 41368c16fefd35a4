"""Human passwords: argon2id (memory-hard), hashed off the event loop."""

from __future__ import annotations

import asyncio

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

# argon2-cffi's defaults are RFC 9106's low-memory profile (64 MiB, t=3, p=4):
# about 0.16 s per hash on two cores.
_HASHER = PasswordHasher()
# Verified against when the e-mail is unknown, so a login takes as long
# whether or not the account exists.
_DUMMY = _HASHER.hash("no such account: equal work either way")


async def hash_password(password: str) -> str:
    return await asyncio.to_thread(_HASHER.hash, password)


async def verify_password(stored: str | None, password: str) -> bool:
    """True when ``password`` matches ``stored`` (None: no account, still hashed)."""

    def check() -> bool:
        try:
            return _HASHER.verify(stored or _DUMMY, password) and stored is not None
        except (VerificationError, InvalidHashError):
            return False

    return await asyncio.to_thread(check)


def needs_rehash(stored: str) -> bool:
    return _HASHER.check_needs_rehash(stored)
