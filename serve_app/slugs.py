"""URL-safe names: usernames and pattern slugs."""

from __future__ import annotations

import re
import unicodedata

_NON_WORD = re.compile(r"[^a-z0-9]+")


def slugify(text: str, *, sep: str = "-", max_len: int = 80, fallback: str = "item") -> str:
    """Lower-case ASCII words of ``text`` joined by ``sep`` (accents folded)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = _NON_WORD.sub(sep, ascii_text.lower()).strip(sep)[:max_len].strip(sep)
    return slug or fallback
