"""The keyword queries: rare identifiers that occur in one document only;
and which paraphrase queries would be ambiguous."""

from __future__ import annotations

import bisect
import collections
import random
import re

from benchmarks.search_eval.text import (
    Raw,
    content_words,
    stems,
)

# --------------------------------------------------------------------------- queries

IDENT_PATTERNS = [
    re.compile(r"(?<![\w-])--[a-z][a-z0-9]+(?:-[a-z0-9]+)+(?![\w-])"),  # --long-option
    re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]\b"),  # O_NONBLOCK, SO_REUSEADDR
    re.compile(r"\b[a-z][a-z0-9]+(?:_[a-z0-9]+)+\b"),  # snake_case identifiers
    re.compile(r"\b[A-Z][a-z]+(?:[A-Z][a-z0-9]+)+\b"),  # CamelCase names and config keys
]


def identifiers(text: str) -> set[str]:
    out: set[str] = set()
    for pat in IDENT_PATTERNS:
        out.update(m.group(0) for m in pat.finditer(text))
    return {t for t in out if 8 <= len(t) <= 40}


def defined_identifiers(content: str) -> set[str]:
    """Identifiers a write-up documents: those among the first words of a line
    (an option list, a parameter list, a table of constants) or in its
    synopsis or signature, not the names used in a code example."""
    out: set[str] = set()
    for i, line in enumerate(content.splitlines()):
        s = (
            line.strip().lstrip("•*-·").strip()
            if not line.strip().startswith("--")
            else line.strip()
        )
        if not s or s.startswith((">>>", "...", "$", "#")):
            continue
        head = s if i == 0 else " ".join(s.split()[:3])
        out |= identifiers(head)
    return out


def full_text(doc: dict[str, str]) -> str:
    return f"{doc['title']}\n{doc['description']}\n{doc['content']}"


def keyword_queries(
    docs: list[dict[str, str]], targets_taken: set[str], rng: random.Random, n: int
) -> list[dict[str, object]]:
    df: collections.Counter[str] = collections.Counter()
    per_doc: dict[str, set[str]] = {}
    for d in docs:
        ids = identifiers(full_text(d))
        per_doc[d["id"]] = ids
        df.update(ids)
    big = Haystack([full_text(d).lower() for d in docs])
    # the last component of a Python name is a findable identifier too
    title_names: collections.Counter[str] = collections.Counter()
    for d in docs:
        if d["source"].startswith("py:"):
            title_names[d["source"].rsplit(".", 1)[-1]] += 1
    candidates: list[tuple[str, str, str]] = []  # (doc id, identifier, kind)
    for d in docs:
        if d["id"] in targets_taken:
            continue
        name = d["source"].split(":", 1)[1]
        if d["source"].startswith("py:"):
            last = name.rsplit(".", 1)[-1]
            if "_" in last and len(last) >= 10 and title_names[last] == 1:
                candidates.append((d["id"], last, "name"))
        # READMEs are left out: their identifiers are mostly names in code examples
        defined = set() if d["source"].startswith("pkg:") else defined_identifiers(d["content"])
        body_ids = sorted(
            t
            for t in per_doc[d["id"]]
            if df[t] == 1 and t.lower() not in d["title"].lower() and t in defined
        )
        # an identifier must be unique case-insensitively too
        body_ids = [t for t in body_ids if big.docs_containing(t.lower()) == 1]
        if body_ids:
            candidates.append((d["id"], rng.choice(body_ids), "body"))
    rng.shuffle(candidates)
    by_group: dict[str, list[tuple[str, str, str]]] = collections.defaultdict(list)
    doc_by_id = {d["id"]: d for d in docs}
    for c in candidates:
        by_group[doc_by_id[c[0]]["source"].split(":", 1)[0] + c[2]].append(c)
    # interleave groups so that man flags, Python names and constants all appear
    picked: list[tuple[str, str, str]] = []
    groups = sorted(by_group)
    while len(picked) < n and any(by_group.values()):
        for g in groups:
            if by_group[g] and len(picked) < n:
                picked.append(by_group[g].pop())
    out: list[dict[str, object]] = []
    for doc_id, ident, _kind in picked:
        d = doc_by_id[doc_id]
        form = rng.random()
        topic = _topic_word(d)
        if form < 0.55 or not topic:
            q = ident
        elif form < 0.8:
            q = f"{ident} {topic}"
        else:
            q = f"{topic} {ident}"
        out.append({"query": q, "relevant": [doc_id], "style": "keyword"})
    return out


class Haystack:
    """All documents' lower-cased text in one string, to count documents containing a token."""

    def __init__(self, texts: list[str]) -> None:
        self.text = "\x00".join(texts)
        self.starts = []
        pos = 0
        for t in texts:
            self.starts.append(pos)
            pos += len(t) + 1

    def docs_containing(self, token: str) -> int:
        first, last = self.text.find(token), self.text.rfind(token)
        if first == -1:
            return 0
        return (
            1
            if bisect.bisect_right(self.starts, first) == bisect.bisect_right(self.starts, last)
            else 2
        )


def _topic_word(d: dict[str, str]) -> str:
    """A generic word from the write-up's title (not its distinctive name)."""
    name = d["source"].split(":", 1)[1].split("(")[0]
    words = [w for w in content_words(d["title"]) if w not in name.lower() and len(w) > 3]
    return sorted(words)[0] if words else ""


def ambiguous(raw: Raw, all_raws: list[Raw], summary_index: dict[str, list[int]]) -> bool:
    """Whether a summary line could just as well describe another write-up."""
    q = stems(raw.summary)
    if len(q) < 2:
        return True
    counts: collections.Counter[int] = collections.Counter()
    for w in q:
        for i in summary_index.get(w, ()):
            counts[i] += 1
    for i, c in counts.items():
        other = all_raws[i]
        if other is raw or c < max(2, int(0.6 * len(q))):
            continue
        o = stems(other.summary)
        if len(q & o) / len(q | o) >= 0.5:
            return True
    return False
