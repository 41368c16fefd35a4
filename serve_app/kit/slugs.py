"""URL-safe names: usernames, pattern and question slugs."""

from __future__ import annotations

import re
import secrets
import unicodedata
import uuid

_NON_WORD = re.compile(r"[^a-z0-9]+")


def slugify(text: str, *, sep: str = "-", max_len: int = 80, fallback: str = "item") -> str:
    """Lower-case ASCII words of ``text`` joined by ``sep`` (accents folded)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = _NON_WORD.sub(sep, ascii_text.lower()).strip(sep)[:max_len].strip(sep)
    return slug or fallback


_SUFFIX_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
SUFFIXED_ATTEMPTS = 8


def reads_as_id(slug: str) -> bool:
    """Whether a path segment would be taken for an id: ``rows.id_or_slug``
    tries ``uuid.UUID`` first, which reads any 32 hex digits, hyphens anywhere."""
    try:
        uuid.UUID(slug)
    except ValueError:
        return False
    return True


def candidates(title: str, *, fallback: str) -> list[str]:
    """Slugs to try in turn for a new row: the title's slug, then the same with a
    random 6-character suffix (the unique constraint decides which one is free).
    None reads as an id (a title of 32 hex digits would name another row's id,
    or none, in every path): such a slug gets ``-{fallback}`` (or ``-x``)."""
    base = slugify(title, max_len=80, fallback=fallback)
    if reads_as_id(base):
        base = f"{base}-{fallback}" if not reads_as_id(f"{base}-{fallback}") else f"{base}-x"
    suffixes = (
        "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(6))
        for _ in range(SUFFIXED_ATTEMPTS)
    )
    suffixed = [f"{base}-{s}" for s in suffixes]
    return [base, *(s for s in suffixed if not reads_as_id(s))]
