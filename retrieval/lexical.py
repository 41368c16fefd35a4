"""Lexical ranking: a code-aware tokenizer and a BM25 index with field weights.

``tokens(text)`` reads prose and code alike:

* a token is a run of letters, digits and ``_``, joined by ``.``, ``-`` or
  ``::`` (``os.path.join``, ``--dry-run``, ``EPOLL_CTL_DEL``, ``std::vector``);
* each is lowercased and kept whole, and an identifier made of several parts
  also yields its parts, split on ``_``, ``.``, ``-``, ``::`` and camelCase
  (``getHTTPResponse`` → ``gethttpresponse``, ``get``, ``http``, ``response``),
  so a query for the whole name and one for its words both match;
* a short list of English function words is dropped (they carry no
  evidence; BM25's IDF would make them nearly worthless anyway), and nothing
  is stemmed: ``sorted`` and ``sort`` stay apart, as they do in code
  (docs/decisions/search.md, "Lexical ranking and fusion (issue 23)").

``LexicalIndex`` keeps documents of several fields (title, description, tags,
content) in a tantivy index, keyed by a 64-bit id, and ranks a query by BM25
(tantivy's: k1 = 1.2, b = 0.75, document frequencies over the index) with
field weights in the BM25F manner (``LexicalParams``). Adds replace documents
of the same id; removes drop them. One writer at a time (a lock); searches may
run alongside.

The index lives in memory, or in a folder (``path``): there any number of
processes open it, each memory-mapping the same files (the node's page cache,
not each process's heap), and at most one of them writes at a time (tantivy's
writer lock on the folder: ``open_writer`` raises ``WriterBusy`` while another
holds it). A reader sees another's commits after ``reload``. The same
documents give the same scores in memory and on disk: the files are the same
(``retrieval/lexical_store.py`` keeps one such folder per node).
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import tantivy

# A token: word characters joined by '.', '-' or '::' (a qualified name, a
# flag, a C++ name). Apostrophes end a word ("don't" -> "don", "t").
_TOKEN = re.compile(r"\w+(?:(?:\.|-|::)\w+)*")
_SEPARATORS = re.compile(r"[._\-:]+")
# camelCase / PascalCase / acronyms / digits: getHTTPResponse2 -> get HTTP Response 2
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_]+")
# Words that say nothing about a document's subject. Short on purpose: words
# such as "file", "get" or "return" are evidence in code search.
_STOPWORDS_TEXT = (
    "a an and are as at be by for from has have how i if in into is it its of on or "
    "that the their then there these this those to was were what when where which "
    "while who will with would you your"
)
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
# Longer tokens are noise (base64, hashes) and would bloat the term dictionary.
MAX_TOKEN = 64


def _parts(word: str) -> list[str]:
    parts: list[str] = []
    for piece in _SEPARATORS.split(word):
        if piece:
            parts.extend(_CAMEL.findall(piece))
    return parts


def tokens(text: str) -> list[str]:
    """The index terms of ``text`` in order (see the module docstring)."""
    out: list[str] = []
    for match in _TOKEN.finditer(text):
        word = match.group()
        whole = word.lower()
        if len(whole) > MAX_TOKEN:
            continue
        if word.isalpha() and (word.islower() or word[1:].islower()):
            # The common case: a plain word, nothing to split.
            if whole not in STOPWORDS:
                out.append(whole)
            continue
        parts = [p.lower() for p in _parts(word)]
        if len(parts) <= 1:
            if whole not in STOPWORDS:
                out.append(whole)
            continue
        out.append(whole)
        out.extend(p for p in parts if p not in STOPWORDS)
    return out


# The fields of a document.
FIELDS: tuple[str, ...] = ("title", "description", "tags", "content")


@dataclass(frozen=True)
class LexicalParams:
    """How many times a field's terms count (BM25F-style field weights).

    The fields are indexed as one text in which each field's terms are
    repeated its weight times: term frequencies are weighted and summed
    over the fields *before* BM25's saturation, and the length normalisation
    sees the weighted length (BM25F with one b). Scoring each field by its
    own BM25 and adding the scores instead counts a common word once per
    field it occurs in, and ranked much worse on every evaluation set
    (docs/benchmarks.md, "Search ranking quality"). The weights were chosen
    on the sets' dev queries (``ranking_eval.py --tune-fields`` at commit f8c1b82)."""

    weights: Mapping[str, int] = field(
        default_factory=lambda: {"title": 2, "description": 2, "tags": 2, "content": 1}
    )


DEFAULT_LEXICAL = LexicalParams()
TEXT = "text"


class WriterBusy(RuntimeError):
    """Another writer (in this process or another) holds the index folder."""


# A writer opened to follow edits: tantivy's smallest budget (15 MB per
# thread); its arena grows only as far as the documents of one update need.
UPDATE_HEAP = 15_000_000


class LexicalIndex:
    """BM25 over documents of ``FIELDS``, in memory or in a folder (tantivy).

    ``path`` None: in memory, with its writer. With a ``path``: the index in
    that folder (created if missing); ``writer`` opens its writer at once
    (taking the folder's lock), else the index is read until ``open_writer``."""

    def __init__(
        self,
        params: LexicalParams = DEFAULT_LEXICAL,
        heap_bytes: int = 50_000_000,
        path: str | os.PathLike[str] | None = None,
        writer: bool = True,
    ):
        self.params = params
        self.path = None if path is None else os.fspath(path)
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("id", indexed=True, fast=True)
        # Pre-tokenised by ``tokens``: split on spaces only, no positions (no
        # phrase queries), which halves the postings.
        builder.add_text_field(TEXT, tokenizer_name="whitespace", index_option="freq")
        self._schema = builder.build()
        if self.path is None:
            self._index = tantivy.Index(self._schema)
        else:
            os.makedirs(self.path, exist_ok=True)
            self._index = tantivy.Index(self._schema, path=self.path, reuse=True)
            # Reloaded when told (``reload``, ``commit``), not by a thread
            # watching the folder's meta.json.
            self._index.config_reader("manual")
        self._writer: tantivy.IndexWriter | None = None
        self._lock = threading.Lock()
        self._pending = False
        if writer:
            self.open_writer(heap_bytes)
        self._searcher = self._index.searcher()

    # --- writing ----------------------------------------------------------

    @property
    def writable(self) -> bool:
        return self._writer is not None

    def open_writer(self, heap_bytes: int = UPDATE_HEAP) -> None:
        """Take the index's writer (the folder's lock); ``WriterBusy`` while
        another writer, of this process or another, holds it."""
        with self._lock:
            if self._writer is not None:
                return
            try:
                self._writer = self._index.writer(heap_size=heap_bytes, num_threads=1)
            except ValueError as exc:
                if "LockBusy" in str(exc):
                    raise WriterBusy(str(exc)) from exc
                raise

    def close_writer(self) -> None:
        """Let the writer go (and the folder's lock) once its merges are done;
        adds and removes not committed are dropped."""
        with self._lock:
            writer, self._writer = self._writer, None
            pending, self._pending = self._pending, False
        if writer is not None:
            if pending:
                writer.rollback()
            # Consumes the writer: the lock is released when it returns.
            writer.wait_merging_threads()

    def _writing(self) -> tantivy.IndexWriter:
        if self._writer is None:
            raise RuntimeError("this index was opened for reading: open_writer() first")
        return self._writer

    def text(self, fields: Mapping[str, str | None]) -> str:
        """The indexed text of a document: each field's terms, weight times."""
        parts = []
        for name in FIELDS:
            value = fields.get(name)
            repeat = self.params.weights.get(name, 0)
            if value and repeat > 0:
                terms = " ".join(tokens(value))
                if terms:
                    parts += [terms] * repeat
        return " ".join(parts)

    def __len__(self) -> int:
        return int(self._searcher.num_docs)

    def add(self, docs: Iterable[tuple[int, Mapping[str, str | None]]]) -> int:
        """Index (id, {field: text}) documents, replacing any with the same
        id; visible to ``search`` after ``commit``. The number added."""
        n = 0
        with self._lock:
            writer = self._writing()
            for doc_id, fields in docs:
                writer.delete_documents_by_term("id", int(doc_id))
                doc = tantivy.Document(id=int(doc_id))
                doc.add_text(TEXT, self.text(fields))
                writer.add_document(doc)
                n += 1
            self._pending = self._pending or n > 0
        return n

    def remove(self, ids: Iterable[int]) -> None:
        with self._lock:
            writer = self._writing()
            for doc_id in ids:
                writer.delete_documents_by_term("id", int(doc_id))
                self._pending = True

    def commit(self) -> None:
        """Make the adds and removes so far visible to searches."""
        with self._lock:
            if not self._pending:
                return
            self._writing().commit()
            self._index.reload()
            self._searcher = self._index.searcher()
            self._pending = False

    def reload(self) -> None:
        """See the index's last commit (made by this process or another)."""
        self._index.reload()
        self._searcher = self._index.searcher()

    def query(self, text: str) -> tantivy.Query | None:
        """The BM25 query for ``text``: any of its terms (a term the query
        repeats counts that many times)."""
        counts = Counter(tokens(text))
        if not counts:
            return None
        clauses = []
        for term, n in counts.items():
            q = tantivy.Query.term_query(self._schema, TEXT, term)
            if n > 1:
                q = tantivy.Query.boost_query(q, float(n))
            clauses.append((tantivy.Occur.Should, q))
        return tantivy.Query.boolean_query(clauses)

    def search(self, text: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` best (id, BM25 score) for ``text``, best first; ties by id."""
        query = self.query(text)
        if query is None or k <= 0:
            return []
        searcher = self._searcher
        hits = searcher.search(query, k).hits
        if not hits:
            return []
        ids = searcher.fast_field_values("id", [address for _, address in hits])
        found = [
            (int(i), float(score)) for (score, _), i in zip(hits, ids, strict=True) if i is not None
        ]
        found.sort(key=lambda h: (-h[1], h[0]))
        return found

    def doc_freq(self, term: str) -> int:
        return int(self._searcher.doc_freq(TEXT, term))

    def scale(self, text: str) -> float:
        """The BM25 score a document would get with each query term once at
        the average length: the sum of the terms' IDF, ``ln(1 + (N - n +
        0.5) / (n + 0.5))``, a term absent from the index included (the query
        asks for it; nothing explains it). ``hybrid`` divides by it, so the
        lexical half says how much of the query a document explains."""
        searcher = self._searcher
        total_docs = int(searcher.num_docs)
        total = 0.0
        for term, n in Counter(tokens(text)).items():
            df = int(searcher.doc_freq(TEXT, term))
            total += n * math.log(1.0 + (total_docs - df + 0.5) / (df + 0.5))
        return total
