"""Documents made from the raw texts: prose kept, content clipped, the
summary cut out when it becomes the query; a quota per source group, and
duplicates dropped."""

from __future__ import annotations

import collections
import random
import re
from collections.abc import Iterable

from benchmarks.search_eval.config import MAX_CONTENT, MIN_CONTENT
from benchmarks.search_eval.text import (
    Raw,
    clip,
    fingerprint,
    first_sentence,
    squash,
)

# --------------------------------------------------------------------------- assembling documents


SECTION_HEAD = re.compile(
    r"(parameters|returns?|args|arguments|raises|yields?|examples?|notes?|see also|attributes|"
    r"keyword arguments|warnings?|references|methods|other parameters|usage|options|"
    r"example usage|properties|params|return value|kwargs)\s*:?",
    re.I,
)


def is_prose(par: str) -> bool:
    first = par.strip().splitlines()[0].strip() if par.strip() else ""
    if not first or SECTION_HEAD.fullmatch(first) or first.startswith((">>>", "$", "#", "-", "*")):
        return False
    return bool(re.match(r"[A-Z`\"']", first)) and len(squash(par)) >= 30


def make_doc(raw: Raw, *, target: bool) -> dict[str, str]:
    """Title, description and content of a write-up.

    The description is the first sentence of the body when the body starts
    with prose (else the synopsis or signature). A paraphrase target loses its
    summary line: the title is the bare name, so the query (the summary) is
    nowhere in the document.
    """
    head, _, remainder = raw.body.partition("\n\n")
    lead = raw.lead
    if is_prose(head):
        first, rest = first_sentence(head)
        body = (rest + "\n\n" + remainder).strip()
    else:
        first, body = lead, raw.body
        lead = ""
    title = raw.name if target else f"{raw.name}: {raw.summary}"
    if len(title) > 140:
        title = clip(title, 140)
    description = clip(first, 300)
    content = clip(((lead + "\n\n") if lead else "") + body, MAX_CONTENT)
    return {"title": title, "description": description, "content": content}


def usable(raw: Raw) -> bool:
    head = raw.body.partition("\n\n")[0]
    first = first_sentence(head)[0] if is_prose(head) else raw.lead
    return len(first) >= 20 and len(raw.body) >= MIN_CONTENT + 100


def choose(raws: list[Raw], quota: int, rng: random.Random) -> list[Raw]:
    raws = sorted(raws, key=lambda r: r.source)
    rng.shuffle(raws)
    return raws[:quota]


def dedupe(raws: Iterable[Raw]) -> list[Raw]:
    """Drop near-identical write-ups (same body text, or same name and summary)."""
    seen_body: set[str] = set()
    seen_name: set[str] = set()
    seen_summary: collections.Counter[str] = collections.Counter()
    out = []
    for r in raws:
        fp = fingerprint(r.body)
        short = r.name.split(".")[-1].lower() + "|" + squash(r.summary.lower())
        if fp in seen_body or short in seen_name or r.source in seen_name:
            continue
        seen_body.add(fp)
        seen_name.add(short)
        seen_name.add(r.source)
        seen_summary[squash(r.summary.lower())] += 1
        out.append(r)
    return out
