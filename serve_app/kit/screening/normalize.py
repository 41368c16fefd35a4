"""Text normalisation for the screen: what a rule matches against.

Rules never see raw text. A field is folded as a whole (NFKC, a confusables
map, zero-width characters dropped, case folded, string concatenations in
code joined, letter-spaced words closed up, comment markers at line starts
dropped in prose) by operations that never add or remove a newline, so a
match's line is the count of newlines before it in the folded text. Prose
then reads as one line (a phrase split over lines still matches); code keeps
its lines except where a shell continuation joins them. Decoded variants
(URL-encoding, base64 tokens that decode to text) are appended after the text
as extra segments carrying their source line.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote

import ahocorasick_rs

# Zero-width and other invisible format characters, dropped before matching.
ZERO_WIDTH = "\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u180e\u00ad"

# Common homoglyphs that NFKC leaves alone (Cyrillic, Greek, a few Latin look-
# alikes), mapped to the ASCII letter a reader would see. A short list drawn
# from Unicode's confusables.txt: the letters used to spell English trigger
# words, not the whole table.
_CONFUSABLES = {
    # Cyrillic lower
    "а": "a", "в": "b", "е": "e", "ё": "e", "һ": "h", "і": "i", "ї": "i", "ј": "j",
    "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c", "ѕ": "s", "т": "t",
    "у": "y", "х": "x", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ɡ": "g", "ӏ": "l", "ь": "b",
    # Cyrillic upper
    "А": "a", "В": "b", "Е": "e", "Ѕ": "s", "І": "i", "Ј": "j", "К": "k", "М": "m",
    "Н": "h", "О": "o", "Р": "p", "С": "c", "Т": "t", "У": "y", "Х": "x", "Ү": "y",
    # Greek
    "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o",
    "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "Α": "a", "Β": "b", "Ε": "e", "Η": "h",
    "Ι": "i", "Κ": "k", "Μ": "m", "Ν": "n", "Ο": "o", "Ρ": "p", "Τ": "t", "Υ": "y",
    "Χ": "x", "Ζ": "z",
    # Latin look-alikes
    "ı": "i", "ȷ": "j", "ℓ": "l", "ø": "o", "đ": "d",
}  # fmt: skip
_FOLD_MAP = {**_CONFUSABLES, **dict.fromkeys(ZERO_WIDTH, "")}
_FOLD_RX = re.compile("[" + re.escape("".join(_FOLD_MAP)) + "]")

# "cu"+"rl", 'ig' + 'nore', "a" . "b" (PHP), "a" .. "b" (Lua), "a" "b" (C and
# Python implicit concatenation): the quotes and operator between two literals.
_CONCAT = re.compile(r"""(["'])[ \t]*(?:\+|\.\.?|)[ \t]*\1""")
# A comment or quote marker at the start of a line: "# ignore all" / "# previous
# instructions" reads as one sentence once the markers go.
_LINE_PREFIX = re.compile(r"[ \t]*(?:#+|//+|/?\*+|--|;+|>+|%+|rem\b)[ \t]?")
# The same after a newline: a literal first character the regex engine skips
# to, where a MULTILINE "^" is tried at every position of the field.
_LINE_PREFIX_NL = re.compile("\n" + _LINE_PREFIX.pattern)
# Five or more single letters separated by single spaces: "i g n o r e".
_SPACED = re.compile(r"\b(?:\w[ .\-_]){4,}\w\b")
# A cheap first look for _SPACED: a separator, then letter-separator pairs.
_SPACED_HINT = re.compile(r"[ .\-_]\w[ .\-_]\w[ .\-_]\w[ .\-_]\w\b")
_URL_ESCAPE = re.compile(r"%[0-9a-fA-F]{2}")
# Only at the start of a run: inside a run shorter than 16 a match would be
# tried (and fail) at every character; a longer run matches from its start.
_B64_TOKEN = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{16,}={0,2}")
# Runs of base64 characters are found as runs of "a" in a byte copy of the
# text (one byte per character: anything else is a space): a fast substring
# search instead of a regex tried at every character.
_B64_RUN = b"a" * 16
_B64_BYTES = bytes(
    ord("a") if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "+/") else ord(" ")
    for c in range(256)
)
_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")
_PRINTABLE = re.compile(r"^[\x20-\x7e\t\r\n]+$")
_CONTINUATION = re.compile(r"(?<=[ \t|])\\\n")


@dataclass(frozen=True)
class Normalized:
    """A field's folded text; ``line_at`` maps an offset to its 1-based line."""

    text: str
    lined: str  # the folded text with its newlines (same length up to ``end``)
    end: int
    extra_starts: tuple[int, ...] = ()
    extra_lines: tuple[int, ...] = ()
    # For a view of some lines only (the code in markdown): the field line of
    # each line of ``lined``.
    line_numbers: tuple[int, ...] | None = None

    def line_at(self, offset: int) -> int:
        if offset < self.end:
            index = self.lined.count("\n", 0, offset)
            return self.line_numbers[index] if self.line_numbers is not None else index + 1
        return self.extra_lines[bisect.bisect_right(self.extra_starts, offset) - 1]


def _unspace_line(line: str) -> str:
    """Close up letter-spaced text: "i g n o r e  a l l" → "ignore all"."""
    tokens = line.split()
    singles = sum(1 for t in tokens if len(t) == 1)
    if singles >= 6 and singles >= 0.6 * len(tokens):
        words = re.split(r"\s{2,}|\s*/\s*", line.strip())
        return " ".join(w.replace(" ", "") for w in words)
    return _SPACED.sub(lambda m: re.sub(r"[ .\-_]", "", m.group(0)), line)


def _nfkc(text: str) -> str:
    """``unicodedata.normalize("NFKC", text)``, normalising only the runs of
    non-ASCII characters (each with the character before it).

    The same result: an ASCII character is a starter that NFKC leaves alone
    and that never composes with what comes before it (no composition pair
    ends in one), so text splits into independent pieces at each ASCII
    character that does not precede a non-ASCII one (that one may compose
    with the run: "e" + U+0301). A 64 KB field of English with a few
    typographic quotes is mostly ASCII; normalising all of it costs more.
    """
    parts: list[str] = []
    at = 0
    for m in _NON_ASCII_RUN.finditer(text):
        start = max(m.start() - 1, at)
        parts.append(text[at:start])
        parts.append(unicodedata.normalize("NFKC", text[start : m.end()]))
        at = m.end()
    parts.append(text[at:])
    return "".join(parts)


def base_fold(text: str) -> str:
    """NFKC, confusables, zero-width dropped, lower case, string literals
    joined; keeps every newline."""
    if not text.isascii():
        text = _nfkc(text)
        # Replace only the characters present: translate() with a dict looks
        # up every character of a 64 KB field in Python; a character class
        # scans in C.
        if _FOLD_RX.search(text):
            text = _FOLD_RX.sub(lambda m: _FOLD_MAP[m.group(0)], text)
    text = text.lower()
    if "'" in text or '"' in text:
        text = _CONCAT.sub("", text)
    return text


def prose_fold(base: str) -> str:
    """Prose on top of ``base_fold``: letter-spacing closed up, comment and
    quote markers at line starts dropped."""
    if _SPACED_HINT.search(base) and _SPACED.search(base):
        base = "\n".join(_unspace_line(x) if _SPACED.search(x) else x for x in base.split("\n"))
    m = _LINE_PREFIX.match(base)
    if m:
        base = base[m.end() :]
    return _LINE_PREFIX_NL.sub("\n", base) if "\n" in base else base


def fold(text: str, *, prose: bool = True) -> str:
    """``text`` as the rules see it (no decoding); keeps every newline."""
    base = base_fold(text)
    return prose_fold(base) if prose else base


def _b64_tokens(text: str) -> Iterator[re.Match[str]]:
    """``_B64_TOKEN.finditer(text)``, tried only where a run starts."""
    # "replace" keeps one byte per character, so offsets carry over.
    runs = text.encode("ascii", "replace").translate(_B64_BYTES)
    at = runs.find(_B64_RUN)
    while at >= 0:
        m = _B64_TOKEN.match(text, at)
        assert m is not None  # a run of 16 that starts here
        yield m
        at = runs.find(_B64_RUN, m.end())


def _decoded(text: str) -> list[tuple[int, str]]:
    """(offset, text) hidden in ``text`` by URL-encoding or base64."""
    out: list[tuple[int, str]] = []
    if "%" in text and _URL_ESCAPE.search(text):
        start = 0
        for line in text.split("\n"):
            if "%" in line and _URL_ESCAPE.search(line):
                out.append((start, unquote(line)))
            start += len(line) + 1
    for m in _b64_tokens(text):
        token = m.group(0)
        # Base64 of text has both cases and a length that is a multiple of 4;
        # identifiers, digests and paths mostly fail one or the other.
        if len(token) % 4 or token.islower() or token.isupper():
            continue
        try:
            data = base64.b64decode(token, validate=True)
            decoded = data.decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if len(decoded) >= 8 and " " in decoded and _PRINTABLE.match(decoded):
            out.append((m.start(), decoded))
    return out


@dataclass(frozen=True)
class Views:
    """A field folded once, seen as prose and as code."""

    prose: Normalized
    code: Normalized


def _with_extras(main: str, lined: str, extras: list[tuple[int, str]], **kw: object) -> Normalized:
    if not extras:
        return Normalized(main, lined, len(main), **kw)  # type: ignore[arg-type]
    parts = [main, "\n"]
    starts: list[int] = []
    lines: list[int] = []
    offset = len(main) + 1
    for line, piece in extras:
        starts.append(offset)
        lines.append(line)
        parts.append(piece + "\n")
        offset += len(piece) + 1
    return Normalized("".join(parts), lined, len(main), tuple(starts), tuple(lines), **kw)  # type: ignore[arg-type]


def _code_view(
    base: str, line_numbers: tuple[int, ...] | None, extras: list[tuple[int, str]]
) -> Normalized:
    if "\\\n" in base:
        # Join shell continuations (" \" at a line end; a Windows path such as
        # C:\ ends in a bare backslash and continues nothing), keeping the
        # newline's place so offsets still map to lines.
        lined = _CONTINUATION.sub(" \n", base)
        main = _CONTINUATION.sub("  ", base)
    else:
        lined = main = base
    return _with_extras(main, lined, extras, line_numbers=line_numbers)


def views(text: str, kind: str) -> Views:
    """Fold ``text`` once; the prose view reads as one line (a phrase split
    over lines still matches), the code view keeps its lines. For markdown
    the code view holds only the code in it (``markdown_code``)."""
    base = base_fold(text)
    decoded = _decoded(text) if ("%" in text or len(text) >= 16) else []
    extras = [(text.count("\n", 0, off) + 1, base_fold(d).replace("\n", " ")) for off, d in decoded]
    prose_base = prose_fold(base)
    prose = _with_extras(prose_base.replace("\n", " "), prose_base, extras)
    if kind == "code":
        code = _code_view(base, None, extras)
    elif kind == "markdown":
        code_lines, numbers = markdown_code(text)
        code_base = base_fold("\n".join(code_lines)) if code_lines else ""
        code = _code_view(code_base, numbers, [])
    else:
        code = Normalized("", "", 0)
    return Views(prose, code)


def normalize(text: str, *, code: bool = False) -> Normalized:
    """One view of ``text`` (see ``views``)."""
    v = views(text, "code" if code else "plain")
    return v.code if code else v.prose


_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_FENCE_RUN = re.compile(r"`{3,}|~{3,}")
# A line of code outside fences starts with one of these (or has a backtick:
# an inline span). Found after a newline: a literal first character the
# regex engine skips to, where a MULTILINE "^" is tried at every position.
_CODE_PREFIXES = ("    ", "\t", "$ ", "> $ ", "PS> ", "C:\\>")
_CODE_PREFIX_NL = re.compile(r"\n(?:    |\t|\$ |> \$ |PS> |C:\\>)")


def markdown_code(text: str) -> tuple[list[str], tuple[int, ...]]:
    """The code in markdown: fenced and indented blocks and shell-prompt
    lines whole, inline spans alone; with the field line of each."""
    out: list[str] = []
    numbers: list[int] = []
    if (
        "`" not in text
        and "~~~" not in text
        and "    " not in text
        and "\t" not in text
        and "$ " not in text
    ):
        return out, ()
    # The field is walked by regex passes, not line by line: the fence lines
    # (a run of 3+ backticks or tildes after at most 3 spaces) split it into
    # regions inside fences (every line kept) and outside (only the lines
    # _CODE_LINE finds). Line numbers are counted between increasing offsets.
    counted = [0, 1]  # an offset and the line it is on

    def line_at(offset: int) -> int:
        counted[1] += text.count("\n", counted[0], offset)
        counted[0] = offset
        return counted[1]

    def inside(start: int, end: int) -> None:
        # Every line from the line start ``start`` to ``end`` (exclusive).
        first = line_at(start)
        lines = text[start:end].split("\n")
        out.extend(lines)
        numbers.extend(range(first, first + len(lines)))

    def outside(start: int, end: int) -> None:
        # Lines from the line start ``start`` to ``end``: those that start
        # with a prefix, and those with a backtick (str.find skips to each).
        starts = [start] if text.startswith(_CODE_PREFIXES, start) else []
        starts.extend(m.start() + 1 for m in _CODE_PREFIX_NL.finditer(text, start, end))
        tick = text.find("`", start, end)
        while tick >= 0:
            starts.append(text.rfind("\n", start, tick) + 1 or start)
            line_end = text.find("\n", tick, end)
            tick = -1 if line_end < 0 else text.find("`", line_end, end)
        for a in sorted(set(starts)):
            b = text.find("\n", a, end)
            raw = text[a : end if b < 0 else b]
            if raw.startswith(_CODE_PREFIXES):
                out.append(raw)
            else:
                spans = [s.group(2) for s in _INLINE_CODE.finditer(raw)]
                if not spans:
                    continue
                out.append(" ; ".join(spans))
            numbers.append(line_at(a))

    fence: str | None = None
    at = 0  # the start of the first line not yet handled
    n = len(text)
    if "```" in text or "~~~" in text:
        for m in _FENCE_RUN.finditer(text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            if line_start < at:
                continue  # a second run on a fence line already handled
            lead = text[line_start : m.start()]
            if len(lead) > 3 or (lead and not lead.isspace()):
                continue
            marker = m.group(0)
            if fence is not None and (marker[0] != fence[0] or len(marker) < len(fence)):
                continue  # a line of the fenced code
            # The region before this fence line ends with the newline before it.
            if line_start > at:
                (outside if fence is None else inside)(at, line_start - 1)
            fence = None if fence is not None else marker
            line_end = text.find("\n", m.end())
            at = n + 1 if line_end < 0 else line_end + 1
    if at <= n:
        (outside if fence is None else inside)(at, n)
    return out, tuple(numbers)


def line_of(text: str, offset: int) -> int:
    """The 1-based line of ``offset`` in raw ``text``."""
    return text.count("\n", 0, offset) + 1


def merge_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, the overlapping ones merged."""
    if len(spans) <= 1:
        return spans
    spans.sort()
    merged = [spans[0]]
    for a, b in spans[1:]:
        if a <= merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


class AnchorSet:
    """The anchors of a group of rules, found in one pass (an Aho-Corasick
    automaton, ahocorasick-rs): each rule's regex then runs only in the
    windows around its anchors (``Scanner``)."""

    def __init__(self, *groups: tuple[str, ...]) -> None:
        self.anchors = sorted({a for group in groups for a in group})
        self._automaton = ahocorasick_rs.AhoCorasick(self.anchors)
        # The groups (rules) each anchor belongs to, by position in ``groups``.
        self._groups_of = {
            a: tuple(i for i, group in enumerate(groups) if a in group) for a in self.anchors
        }

    def scan(self, text: str) -> Scanner:
        positions: dict[str, list[int]] = {}
        for index, start, _ in self._automaton.find_matches_as_indexes(text, overlapping=True):
            positions.setdefault(self.anchors[index], []).append(start)
        return Scanner(text, positions, self._groups_of)


class Scanner:
    """Runs rules over one folded text, each only in the windows around its
    anchors: a regex that starts with an alternation would try every
    position of a 64 KB field; the anchors are found once, for all rules."""

    def __init__(
        self,
        text: str,
        positions: dict[str, list[int]],
        groups_of: dict[str, tuple[int, ...]] | None = None,
    ) -> None:
        self.text = text
        self._positions = positions
        self._groups_of = groups_of or {}

    def groups(self) -> set[int]:
        """The groups (by position in ``AnchorSet(*groups)``) with an anchor
        found: the rules worth running, so a short field without one costs
        no call per rule."""
        return {i for anchor in self._positions for i in self._groups_of.get(anchor, ())}

    def positions(self, anchor: str) -> list[int]:
        return self._positions.get(anchor, [])

    def present(self) -> set[str]:
        """The anchors found at least once."""
        return set(self._positions)

    def windows(self, anchors: tuple[str, ...], before: int, after: int) -> list[tuple[int, int]]:
        """Merged spans around each occurrence of an anchor."""
        found = self._positions
        if not found:
            return []
        # Walk whichever is shorter: the anchors found in this text (often
        # none or a few) or the rule's anchors.
        if len(found) < len(anchors):
            wanted = anchors if isinstance(anchors, frozenset) else frozenset(anchors)
            spans = [
                (max(0, i - before), i + len(anchor) + after)
                for anchor, at in found.items()
                if anchor in wanted
                for i in at
            ]
        else:
            spans = [
                (max(0, i - before), i + len(anchor) + after)
                for anchor in anchors
                for i in found.get(anchor, ())
            ]
        return merge_spans(spans)

    def search(
        self, rx: re.Pattern[str], anchors: tuple[str, ...], before: int = 200, after: int = 400
    ) -> Iterator[re.Match[str]]:
        """``rx.finditer`` over the windows around ``anchors``."""
        for a, b in self.windows(anchors, before, after):
            yield from rx.finditer(self.text, a, b)
