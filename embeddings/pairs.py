"""Training pairs for ``cairn tune``, mined from the corpus: plain functions,
no database, no model (the SQL that reads the items is
``storage.repositories.tuning``).

Each visible item gives (query, document) pairs: the query is what an agent
would type (a title; the first sentence of a description; a question's
title), the document the text the Embedder embeds for the item **with the
query's own text removed** (verbatim, and lines such as docstrings or
comments that repeat it). Left in, the model learns to match strings, not
meaning: measured for issue 50, pairs with the docstring left inside the
function text took a code-search set's MRR@10 from 0.504 to 0.42; without it,
to 0.533.

- An accepted answer is paired with its question's title.
- An item reported as working (a verification that worked) weighs
  ``VERIFIED_WEIGHT`` in the loss, others 1.
- Duplicates collapse: items with the same text (normalised hash) give one
  item's pairs, a fork goes in its origin's group (its pairs repeat the
  origin's), and one (query, document) pair is kept once.
- A group (an item with its forks, a question with its answer) is never
  split: the held-out tenth is the groups whose hash ranks in the lowest
  tenth, so it is deterministic and no held-out query has a twin in training.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

VERIFIED_WEIGHT = 2.0
HELD_OUT = 10  # one group in this many is held out
# The fewest pairs a tune accepts: a tenth of them is the held-out set, whose
# MRR@10 must be measurable (10 queries), and the rest must fill batches.
MIN_PAIRS = 100
# A query shorter than this (words) says too little to learn from.
MIN_QUERY_WORDS = 2
MAX_QUERY_WORDS = 40
# A document left with fewer characters than this after the query's text is
# cut out has nothing left to match.
MIN_DOC_CHARS = 20


class CorpusTooSmall(ValueError):
    """Too few pairs to split into training and a held-out tenth."""


@dataclass(frozen=True)
class Item:
    """A visible searchable row as the miner reads it."""

    kind: str  # pattern, question
    item_id: str
    title: str
    # A pattern's description, a question's body.
    description: str
    # Exactly what the Embedder embeds for the row (storage.models.search).
    text: str
    # Reports that it worked (verifications of any revision).
    worked: int = 0
    # The pattern it was forked from, if any.
    forked_from: str | None = None


@dataclass(frozen=True)
class Answer:
    """An accepted answer, with its question."""

    question_id: str
    question_title: str
    body: str
    worked: int = 0


@dataclass(frozen=True)
class Pair:
    query: str
    document: str
    weight: float = 1.0
    # Pairs of one group never meet in a batch (each would be the other's
    # false negative) and fall on the same side of the split.
    group: str = ""
    source: str = ""  # title, description, question, answer, python
    # Hard negatives (``hard_negatives``): (group, text) of documents the
    # base model ranks near the query that are not the pair's own.
    negatives: tuple[tuple[str, str], ...] = ()


@dataclass
class Mined:
    train: list[Pair]
    heldout: list[Pair]
    items: int = 0
    duplicates: int = 0  # items folded into another (same text, fork)
    dropped: int = 0  # candidate pairs left out (query too short, nothing left)
    by_source: dict[str, int] = field(default_factory=dict)

    @property
    def pairs(self) -> int:
        return len(self.train) + len(self.heldout)


# --- text -------------------------------------------------------------------

_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"[A-Za-z0-9_]+")
# The end of a first sentence: ., ! or ? followed by a space or the end.
_SENTENCE_END = re.compile(r"(?<=[.!?])(?:\s+|$)")
# Markers of a comment or a docstring line, stripped before comparing a line
# to the query.
_MARKERS = re.compile(
    r"^\s*(?:#+|//+|/\*+|\*+/?|--|;+|\"\"\"|'''|\"|')\s*"  # leading
    r"|\s*(?:\"\"\"|'''|\*/)\s*$"  # trailing
)


def normalise(text: str) -> str:
    """Lower case, runs of white space as one space, trimmed."""
    return _SPACE.sub(" ", text).strip().lower()


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (its first line if no sentence ends
    there), white space collapsed."""
    line = next((ln for ln in text.strip().splitlines() if ln.strip()), "")
    flat = _SPACE.sub(" ", line).strip()
    parts = _SENTENCE_END.split(flat, maxsplit=1)
    return parts[0].strip() if parts else ""


def text_hash(text: str) -> str:
    return hashlib.sha256(normalise(text).encode()).hexdigest()


# Words too common to say that a line repeats the query.
_STOP = frozenset(
    {"a", "an", "the", "of", "to", "in", "on", "for", "from", "and", "or", "is", "are"}
    | {"be", "by", "with", "as", "at", "it", "its", "this", "that", "into", "onto"}
)


def _content_words(text: str) -> set[str]:
    return {w for w in words(text) if w not in _STOP}


def _repeats(line: str, query_words: set[str]) -> bool:
    """Does ``line`` repeat the query? A comment or docstring line (it starts
    with a marker) whose content words are mostly the query's; any other line
    whose content words are nearly the query's own (a code line that merely
    uses some of its words stays)."""
    bare = _MARKERS.sub("", line).strip()
    got = _content_words(bare)
    if not got or not query_words:
        return False
    overlap = len(got & query_words)
    if bare != line.strip() and len(got) >= 2:
        return overlap / len(got) >= 0.6
    return overlap / len(got | query_words) >= 0.6


def strip_query(document: str, query: str) -> str:
    """``document`` with ``query``'s text taken out: every verbatim occurrence
    (case and spacing aside), then every line that repeats it (a docstring
    or a comment saying the same thing); blank runs left behind collapse."""
    if not query.strip():
        return document.strip()
    tokens = [re.escape(t) for t in query.split()]
    verbatim = re.compile(r"\s+".join(tokens), re.IGNORECASE)
    cut = verbatim.sub(" ", document)
    qwords = _content_words(query)
    kept = [ln for ln in cut.splitlines() if not (ln.strip() and _repeats(ln, qwords))]
    out = "\n".join(ln.rstrip() for ln in kept)
    out = re.sub(r"\n{3,}", "\n\n", out)
    # A line whose only text was the query leaves punctuation behind.
    return "\n".join(ln for ln in out.splitlines() if ln.strip(" .,:;-")).strip()


def _usable(query: str) -> bool:
    n = len(words(query))
    return MIN_QUERY_WORDS <= n <= MAX_QUERY_WORDS


# --- mining -----------------------------------------------------------------


def _groups(items: Sequence[Item]) -> tuple[list[tuple[str, Item]], int]:
    """Each item kept with its group (forks in their origin's, the same text
    once); how many were folded."""
    by_id = {i.item_id: i for i in items}

    def root(item: Item) -> str:
        seen: set[str] = set()
        at = item
        while at.forked_from and at.forked_from in by_id and at.item_id not in seen:
            seen.add(at.item_id)
            at = by_id[at.forked_from]
        return at.item_id

    kept: list[tuple[str, Item]] = []
    seen_text: dict[str, str] = {}
    roots_seen: set[str] = set()
    folded = 0
    # Originals first, so a fork never displaces the item it copied.
    for item in sorted(items, key=lambda i: (i.forked_from is not None, i.item_id)):
        group = root(item)
        digest = text_hash(item.text)
        if digest in seen_text or (item.forked_from and group in roots_seen):
            folded += 1
            continue
        seen_text[digest] = group
        roots_seen.add(group)
        kept.append((group, item))
    return kept, folded


def item_groups(items: Sequence[Item]) -> dict[str, str]:
    """Every item's group, the folded ones too: a fork is in its origin's,
    an item with another's text in that one's."""
    kept, _ = _groups(items)
    out = {item.item_id: group for group, item in kept}
    by_text = {text_hash(item.text): group for group, item in kept}
    by_id = {i.item_id: i for i in items}
    for item in items:
        if item.item_id in out:
            continue
        group = by_text.get(text_hash(item.text))
        at, seen = item, set()
        while group is None and at.forked_from in by_id and at.item_id not in seen:
            seen.add(at.item_id)
            at = by_id[at.forked_from]  # type: ignore[index]
            group = out.get(at.item_id)
        out[item.item_id] = group or item.item_id
    return out


def hard_negatives(
    pairs: Sequence[Pair],
    query_vectors: Any,
    index_vectors: Any,
    index_groups: Sequence[str],
    index_texts: Sequence[str],
    k: int,
    chunk: int = 1024,
) -> list[Pair]:
    """``pairs`` with up to ``k`` hard negatives each: the documents of the
    index (the base model's vectors of the corpus, ``index_vectors``, rows
    L2-normalised as ``query_vectors``, one row a pair) nearest the pair's
    query, best first, that are not of the pair's group (its item, its
    forks, the same text: its positive or a twin of it)."""
    import numpy as np

    if k < 1 or not len(pairs):
        return list(pairs)
    docs = np.asarray(index_vectors, dtype=np.float32)
    queries = np.asarray(query_vectors, dtype=np.float32)
    n = docs.shape[0]
    groups = np.asarray(index_groups, dtype=object)
    out: list[Pair] = []
    for at in range(0, len(pairs), chunk):
        scores = queries[at : at + chunk] @ docs.T
        # The pair's own group takes a few of the nearest places: look a
        # little deeper than k, and through all of the row if that was not enough.
        depth = min(n, 2 * k + 8)
        top = np.argpartition(-scores, depth - 1, axis=1)[:, :depth] if depth < n else None
        for row, pair in enumerate(pairs[at : at + chunk]):
            found: list[tuple[str, str]] = []
            for candidates in (top[row] if top is not None else None, np.arange(n)):
                if candidates is None:
                    continue
                order = candidates[np.argsort(-scores[row, candidates], kind="stable")]
                found = [
                    (str(groups[j]), index_texts[j]) for j in order if groups[j] != pair.group
                ][:k]
                if len(found) == k or len(candidates) == n:
                    break
            out.append(replace(pair, negatives=tuple(found)))
    return out


def item_pairs(item: Item, group: str) -> list[Pair]:
    """The candidate pairs of one item (queries not yet checked)."""
    weight = VERIFIED_WEIGHT if item.worked > 0 else 1.0
    out = [Pair(item.title.strip(), strip_query(item.text, item.title), weight, group, "title")]
    if item.kind == "pattern":
        sentence = first_sentence(item.description)
        if sentence and normalise(sentence) != normalise(item.title):
            document = strip_query(item.text, sentence)
            out.append(Pair(sentence, document, weight, group, "description"))
    elif item.kind == "question":
        out[0] = replace(out[0], source="question")
    return out


def answer_pair(answer: Answer, group: str) -> Pair:
    weight = VERIFIED_WEIGHT if answer.worked > 0 else 1.0
    document = strip_query(answer.body, answer.question_title)
    return Pair(answer.question_title.strip(), document, weight, group, "answer")


def group_rank(group: str) -> int:
    return int.from_bytes(hashlib.sha256(f"heldout:{group}".encode()).digest()[:8], "big")


def split(pairs: Sequence[Pair]) -> tuple[list[Pair], list[Pair]]:
    """(train, held out): the groups whose hash ranks in the lowest tenth
    (at least one group) are held out."""
    groups = sorted({p.group for p in pairs}, key=group_rank)
    held = set(groups[: max(1, -(-len(groups) // HELD_OUT))]) if len(groups) > 1 else set()
    return [p for p in pairs if p.group not in held], [p for p in pairs if p.group in held]


def mine(
    items: Iterable[Item],
    answers: Iterable[Answer] = (),
    extra: Iterable[Pair] = (),
    min_pairs: int = MIN_PAIRS,
) -> Mined:
    """The corpus's pairs, deduplicated and split; ``extra`` pairs (mined
    elsewhere, e.g. ``python_package_pairs``) go to training only.
    ``CorpusTooSmall`` when fewer than ``min_pairs`` are mined."""
    items = list(items)
    kept, folded = _groups(items)
    group_of = {item.item_id: group for group, item in kept}
    candidates: list[Pair] = []
    for group, item in kept:
        candidates += item_pairs(item, group)
    for answer in answers:
        group = group_of.get(answer.question_id, answer.question_id)
        candidates.append(answer_pair(answer, group))
    pairs: list[Pair] = []
    seen: set[tuple[str, str]] = set()
    dropped = 0
    for pair in candidates:
        key = (normalise(pair.query), text_hash(pair.document))
        if not _usable(pair.query) or len(pair.document) < MIN_DOC_CHARS or key in seen:
            dropped += 1
            continue
        seen.add(key)
        pairs.append(pair)
    if len(pairs) < min_pairs:
        raise CorpusTooSmall(
            f"the corpus is too small to tune on: {len(pairs)} pairs mined from "
            f"{len(items)} visible items; at least {min_pairs} are needed (a tenth is "
            f"held out to measure the tuned model)"
        )
    train, heldout = split(pairs)
    extra_kept = [p for p in extra if (normalise(p.query), text_hash(p.document)) not in seen]
    by_source: dict[str, int] = {}
    for p in pairs + extra_kept:
        by_source[p.source] = by_source.get(p.source, 0) + 1
    return Mined(train + extra_kept, heldout, len(items), folded, dropped, by_source)


def batches(pairs: Sequence[Pair], size: int, seed: int) -> list[list[int]]:
    """One epoch's batches (indices into ``pairs``), shuffled by ``seed``,
    with no group twice in a batch (its pairs would be each other's false
    negatives under in-batch negatives). A pair that fits no open batch
    starts the next one; the last batch may be short."""
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    out: list[list[int]] = []
    groups: list[set[str]] = []
    open_from = 0
    for i in order:
        g = pairs[i].group or f"#{i}"
        for b in range(open_from, len(out)):
            if len(out[b]) < size and g not in groups[b]:
                out[b].append(i)
                groups[b].add(g)
                break
        else:
            out.append([i])
            groups.append({g})
        while open_from < len(out) and len(out[open_from]) >= size:
            open_from += 1
    return out


# --- extra pairs: installed Python packages ---------------------------------


def eval_packages(eval_dirs: Iterable[Path]) -> set[str]:
    """The top-level package names an evaluation set is built from (its
    documents' ``source`` ``py:pkg.…`` and ``pkg:Name``, and the first part
    of a code set's qualified titles), lower case, ``-`` as ``_``."""
    import gzip
    import json

    names: set[str] = set()
    for folder in eval_dirs:
        corpus = folder / "corpus.jsonl.gz"
        if not corpus.is_file():
            continue
        with gzip.open(corpus, "rt") as f:
            for line in f:
                doc = json.loads(line)
                source = str(doc.get("source", ""))
                if source.startswith(("py:", "pkg:")):
                    names.add(source.split(":", 1)[1].split(".")[0])
                title = str(doc.get("title", ""))
                if "." in title.split(":")[0] and " " not in title.split(":")[0]:
                    names.add(title.split(".")[0])
    return {n.lower().replace("-", "_") for n in names if n}


def function_pairs(source: str, group_prefix: str) -> Iterator[Pair]:
    """docstring's first sentence -> the function's source without its
    docstring (nor lines repeating it), for each documented function."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return
    lines = source.splitlines()
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        doc = ast.get_docstring(node)
        if not doc or not node.body or node.end_lineno is None:
            continue
        query = first_sentence(doc)
        if not 4 <= len(words(query)) <= 30:
            continue
        first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        docnode = node.body[0]
        end = docnode.end_lineno or docnode.lineno
        body = lines[first - 1 : docnode.lineno - 1] + lines[end : node.end_lineno]
        document = strip_query("\n".join(body), query)
        if len(document) >= MIN_DOC_CHARS and len(node.body) > 1:
            yield Pair(query, document, 1.0, f"{group_prefix}:{node.name}", "python")


@functools.cache
def _package_roots() -> dict[str, Path]:
    """The installed top-level packages and modules (site-packages, not the
    standard library): name -> its folder or file. Read from the folders
    themselves: listing every distribution's files took 5 s here."""
    import sysconfig

    roots: dict[str, Path] = {}
    for key in ("purelib", "platlib"):
        base = Path(sysconfig.get_paths()[key])
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            name = entry.name.removesuffix(".py")
            if name.startswith(("_", ".")) or "." in name or "-" in name:
                continue
            if (entry.is_dir() and (entry / "__init__.py").is_file()) or entry.suffix == ".py":
                roots.setdefault(name, entry)
    return roots


def python_package_pairs(
    excluded: set[str], limit: int, seed: int = 0, per_package: int = 2000
) -> list[Pair]:
    """Up to ``limit`` pairs from the installed packages' documented functions
    (``function_pairs``), never from a package in ``excluded``
    (``eval_packages``) nor from the standard library; packages drawn in an
    order fixed by ``seed``."""
    roots = {
        name: path
        for name, path in _package_roots().items()
        if name.lower().replace("-", "_") not in excluded
    }
    names = sorted(roots)
    random.Random(seed).shuffle(names)
    out: list[Pair] = []
    for name in names:
        got = 0
        root = roots[name]
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            if {"test", "tests"} & set(path.parts) or path.name.startswith("test_"):
                continue
            try:
                source = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            for pair in function_pairs(source, f"py:{name}:{path.stem}"):
                out.append(pair)
                got += 1
                if len(out) >= limit:
                    return out
                if got >= per_package:
                    break
            if got >= per_package:
                break
    return out
