"""URL-safe names: usernames, pattern and question slugs."""

from __future__ import annotations

import re
import secrets
import unicodedata

_NON_WORD = re.compile(r"[^a-z0-9]+")


def slugify(text: str, *, sep: str = "-", max_len: int = 80, fallback: str = "item") -> str:
    """Lower-case ASCII words of ``text`` joined by ``sep`` (accents folded)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = _NON_WORD.sub(sep, ascii_text.lower()).strip(sep)[:max_len].strip(sep)
    return slug or fallback


_SUFFIX_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
SUFFIXED_ATTEMPTS = 8


def candidates(title: str, *, fallback: str) -> list[str]:
    """Slugs to try in turn for a new row: the title's slug, then the same with a
    random 6-character suffix (the unique constraint decides which one is free)."""
    base = slugify(title, max_len=80, fallback=fallback)
    suffixes = (
        "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(6))
        for _ in range(SUFFIXED_ATTEMPTS)
    )
    return [base, *(f"{base}-{s}" for s in suffixes)]
