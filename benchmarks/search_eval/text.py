"""Text helpers of the set's builder: content words and stems, squashing,
the first sentence, clipping, fingerprints, and ``Raw`` (one source text)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

# --------------------------------------------------------------------------- text helpers

WORD = re.compile(r"[A-Za-z][A-Za-z0-9]+")
STOP = set(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "for",
        "and",
        "or",
        "is",
        "are",
        "be",
        "by",
        "with",
        "from",
        "as",
        "at",
        "this",
        "that",
        "it",
        "its",
        "into",
        "which",
        "when",
        "if",
        "not",
        "no",
        "can",
        "may",
        "will",
        "all",
        "any",
        "each",
        "one",
        "two",
        "use",
        "used",
        "using",
        "uses",
        "than",
        "then",
        "given",
        "given",
        "such",
        "these",
        "those",
        "their",
        "there",
        "also",
        "only",
        "other",
        "more",
        "most",
        "some",
        "how",
        "what",
        "return",
        "returns",
        "returned",
        "get",
        "set",
        "new",
        "s",
        "via",
        "de",
        "per",
        "e",
        "g",
        "i",
        "about",
        "does",
        "do",
        "over",
        "under",
    ]
)


def content_words(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text) if w.lower() not in STOP and len(w) > 2}


def stem(word: str) -> str:
    """A crude stemmer, only to compare queries with documents."""
    w = word.lower()
    for suf in ("ations", "ation", "ings", "ing", "ies", "ied", "es", "ed", "ly", "s"):
        if w.endswith(suf) and len(w) - len(suf) >= 4:
            return w[: -len(suf)]
    return w


def stems(text: str) -> set[str]:
    return {stem(w) for w in content_words(text)}


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


SENTENCE_END = re.compile(r"(?<=[a-z0-9\)\]`'\"])[.!?](?=\s+[A-Z(`'\"]|\s*$)")


def first_sentence(text: str) -> tuple[str, str]:
    """(first sentence, the rest) of a paragraph of plain text."""
    text = squash(text)
    m = SENTENCE_END.search(text)
    if not m:
        return text, ""
    return text[: m.end()].strip(), text[m.end() :].strip()


def clip(text: str, limit: int) -> str:
    """Cut at a line (else word) boundary before ``limit`` characters."""
    if len(text) <= limit:
        return text.strip()
    cut = text[:limit]
    nl = cut.rfind("\n")
    if nl > limit * 0.6:
        return cut[:nl].rstrip()
    sp = cut.rfind(" ")
    return (cut[:sp] if sp > 0 else cut).rstrip() + " …"


def fingerprint(text: str) -> str:
    words = [w.lower() for w in WORD.findall(text)][:120]
    return hashlib.sha1(" ".join(words).encode()).hexdigest()


@dataclass
class Raw:
    """One write-up before it is turned into a document."""

    source: str  # man:tar, py:numpy.linalg.svd, pkg:requests
    group: str  # quota group: man1, gcloud, stdlib, numpy, readme …
    name: str  # what a title starts with: "tar", "numpy.linalg.svd", "requests"
    summary: str  # the one-line summary (NAME line, docstring first line, package summary)
    body: str  # the rest, plain text (first paragraph first)
    lead: str = ""  # text placed before the body in the content (synopsis, signature)
    doc: dict[str, str] = field(default_factory=dict)
