"""Hidden text: characters and markup a reader does not see but a model reads."""

from __future__ import annotations

import re
from collections.abc import Iterator

# Unicode tag characters (U+E0000–U+E007F): invisible ASCII twins, the
# "ASCII smuggling" channel.
_TAGS = re.compile("[\U000e0000-\U000e007f]")
# Embedding, override and isolate controls: Trojan Source (CVE-2021-42574).
# The plain marks (LRM U+200E, RLM U+200F, ALM U+061C) are left alone: RTL
# text uses them and they cannot reorder a line on their own.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
# Two or more zero-width characters in a row: a single ZWJ joins an emoji and
# a single ZWNJ shapes Persian, a run carries bits.
_ZW_RUN = re.compile("[\u200b\u200c\u200d\u2060-\u2064\ufeff\u180e]{2,}")
# An HTML comment in markdown is invisible once rendered. Code (fenced blocks,
# inline spans) is cut out first: showing a comment in code is fine.
_COMMENT = re.compile(r"<!--.*?(?:-->|$)", re.DOTALL)
_FENCE = re.compile(
    r"^([ \t]*)(`{3,}|~{3,})[^\n]*\n.*?(?:^\1?\2[ \t]*$|\Z)", re.DOTALL | re.MULTILINE
)
_INLINE = re.compile(r"(`+)(?!`).+?(?<!`)\1", re.DOTALL)


# Any of the characters above: one scan, and the three rules run only on text
# that has one (most non-ASCII text has typographic quotes and dashes only).
_ANY = re.compile(
    "[\U000e0000-\U000e007f\u202a-\u202e\u2066-\u2069\u200b\u200c\u200d\u2060-\u2064\ufeff\u180e]"
)


def _blank(m: re.Match[str]) -> str:
    # Keep the newlines so offsets still map to the right lines.
    return re.sub(r"[^\n]", " ", m.group(0))


def find_hidden(text: str, *, markdown: bool) -> Iterator[tuple[str, int]]:
    """(kind, offset) of each hidden-text trick in ``text``."""
    if not text.isascii() and _ANY.search(text):
        for kind, rx in (
            ("unicode_tags", _TAGS),
            ("bidi_control", _BIDI),
            ("zero_width_run", _ZW_RUN),
        ):
            for m in rx.finditer(text):
                yield kind, m.start()
    if markdown and "<!--" in text:
        visible = _FENCE.sub(_blank, text) if ("```" in text or "~~~" in text) else text
        visible = _INLINE.sub(_blank, visible) if "`" in visible else visible
        for m in _COMMENT.finditer(visible):
            yield "html_comment", m.start()
