"""The code-aware tokenizer and the BM25 index (retrieval.lexical)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from retrieval.lexical import LexicalIndex, LexicalParams, WriterBusy, tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Retry flaky calls", ["retry", "flaky", "calls"]),
        # snake_case: whole, then parts
        ("linear_sum_assignment", ["linear_sum_assignment", "linear", "sum", "assignment"]),
        # dotted names and camelCase, acronyms kept together
        ("os.path.join", ["os.path.join", "os", "path", "join"]),
        ("getHTTPResponse", ["gethttpresponse", "get", "http", "response"]),
        ("XMLParser", ["xmlparser", "xml", "parser"]),
        # flags lose their dashes, keep their words
        ("--dry-run", ["dry-run", "dry", "run"]),
        ("EPOLL_CTL_DEL", ["epoll_ctl_del", "epoll", "ctl", "del"]),
        ("std::vector", ["std::vector", "std", "vector"]),
        # function words dropped, nothing stemmed
        ("How to sort the sorted lists", ["sort", "sorted", "lists"]),
        ("", []),
        ("-- ... !!", []),
    ],
)
def test_tokens(text: str, expected: list[str]) -> None:
    assert tokens(text) == expected


def test_tokens_drop_very_long_runs() -> None:
    assert tokens("a" * 65 + " short") == ["short"]


def _index(docs: dict[int, dict[str, str | None]], **kw: int) -> LexicalIndex:
    index = LexicalIndex(LexicalParams(weights={"title": 1, "content": 1, **kw}))
    index.add(docs.items())
    index.commit()
    return index


def test_bm25_score_is_the_textbook_formula() -> None:
    """One field: idf · tf·(k1+1) / (tf + k1·(1 - b + b·len/avglen)), k1 1.2, b 0.75,
    idf = ln(1 + (N - n + 0.5)/(n + 0.5))."""
    docs = {
        1: {"content": "alpha beta beta"},
        2: {"content": "alpha gamma"},
        3: {"content": "delta"},
    }
    index = _index(docs)
    [(doc, score)] = index.search("beta", 10)
    n, big_n, tf, length, avg = 1, 3, 2, 3, 2.0
    idf = math.log(1 + (big_n - n + 0.5) / (n + 0.5))
    expected = idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * length / avg))
    assert doc == 1
    assert score == pytest.approx(expected, rel=0.05)  # tantivy quantizes lengths


def test_a_rare_term_outranks_a_common_one() -> None:
    """IDF: of two documents each matching one query word once, the one with
    the rare word ranks first."""
    docs: dict[int, dict[str, str | None]] = {
        i: {"title": f"backup recipe {i}", "content": "nightly backup"} for i in range(10)
    }
    docs[100] = {"title": "zeppelin mooring", "content": "lines and masts"}
    docs[101] = {"title": "backup rotation", "content": "keep seven days"}
    ranked = _index(docs).search("zeppelin backup", 20)
    assert ranked[0][0] == 100
    assert {d for d, _ in ranked} == set(docs)


def test_field_weights_repeat_a_field_before_saturation() -> None:
    """BM25F-style: a field of weight w counts as w copies of its terms in
    one text (frequencies summed before saturation, weighted lengths)."""
    docs: dict[int, dict[str, str | None]] = {
        1: {"title": "parser", "content": "reads tokens fast"},
        2: {"title": "reader", "content": "parser tokens parser"},
    }
    assert [d for d, _ in _index(docs, title=1).search("parser", 5)] == [2, 1]
    assert [d for d, _ in _index(docs, title=3).search("parser", 5)] == [1, 2]
    index = _index({1: {"title": "Zeppelin", "content": "mooring"}}, title=2)
    assert index.text({"title": "Zeppelin", "content": "Mooring", "tags": "x"}) == (
        "zeppelin zeppelin mooring"
    )
    # A field of weight 0 is not indexed.
    assert _index(docs, title=0).search("reader", 5) == []


def test_identifier_parts_and_whole_both_match() -> None:
    docs: dict[int, dict[str, str | None]] = {
        1: {"title": "scipy.optimize.linear_sum_assignment", "content": "def f(cost): ..."},
        2: {"title": "Linear models", "content": "fit a line"},
    }
    index = _index(docs)
    assert index.search("linear_sum_assignment", 5)[0][0] == 1
    assert index.search("sum assignment", 5)[0][0] == 1
    assert {d for d, _ in index.search("linear", 5)} == {1, 2}


def test_upsert_remove_and_commit() -> None:
    index = _index({1: {"title": "old words"}, 2: {"title": "other"}})
    index.add([(1, {"title": "new words"})])
    # Not visible before the commit.
    assert [d for d, _ in index.search("old", 5)] == [1]
    index.commit()
    assert index.search("old", 5) == []
    assert [d for d, _ in index.search("new", 5)] == [1]
    assert len(index) == 2
    index.remove([1])
    index.commit()
    assert index.search("new words", 5) == []
    assert len(index) == 1


def test_scale_is_the_summed_idf_of_the_query_terms() -> None:
    docs: dict[int, dict[str, str | None]] = {
        1: {"content": "alpha beta"},
        2: {"content": "alpha delta"},
        3: {"content": "gamma zeta"},
        4: {"content": "gamma eta"},
    }
    index = _index(docs)

    def idf(n: int) -> float:
        return math.log(1 + (4 - n + 0.5) / (n + 0.5))

    assert index.scale("beta") == pytest.approx(idf(1))
    # A repeated term counts twice; an unknown one as a term no document has.
    assert index.scale("alpha alpha nowhere") == pytest.approx(2 * idf(2) + idf(0))
    assert index.scale("the") == 0.0
    # A document with each query term once, at the average length, scores
    # about the scale (tantivy rounds lengths).
    [(doc, score)] = index.search("beta", 5)
    assert doc == 1 and score == pytest.approx(index.scale("beta"), rel=0.1)


def test_empty_queries() -> None:
    index = _index({1: {"title": "anything"}})
    assert index.search("the of and", 5) == []
    assert index.search("anything", 0) == []
    assert LexicalIndex().search("anything", 5) == []


# --- the index in a folder (retrieval/lexical_store.py shares one per node) ---

QUERIES = [
    "backup",
    "nightly backup rotation",
    "zeppelin mooring lines",
    "parser tokens",
    "os.path.join",
    "alpha beta beta gamma",
    "retry jitter backoff",
    "nothing matches this",
]


def _corpus(n: int = 400) -> dict[int, dict[str, str | None]]:
    """Seeded documents over a small vocabulary: common and rare words,
    lengths that differ (BM25's statistics have something to do)."""
    rng = random.Random(7)
    words = [
        "backup",
        "nightly",
        "rotation",
        "zeppelin",
        "mooring",
        "lines",
        "masts",
        "parser",
        "tokens",
        "fast",
        "reader",
        "os.path.join",
        "alpha",
        "beta",
        "gamma",
        "delta",
        "retry",
        "jitter",
        "backoff",
        "cron",
        "csv",
        "stream",
        "token",
        "refresh",
        "expiry",
        "cache",
    ]
    return {
        i: {
            "title": " ".join(rng.choices(words[:8], k=rng.randint(1, 4))),
            "tags": " ".join(rng.sample(words, 2)),
            "content": " ".join(rng.choices(words, k=rng.randint(3, 40))),
        }
        for i in range(1, n + 1)
    }


def _answers(index: LexicalIndex) -> list[tuple[list[tuple[int, float]], float]]:
    return [(index.search(q, 50), index.scale(q)) for q in QUERIES]


def test_two_readers_and_a_writer_over_one_folder_see_the_same(tmp_path: Path) -> None:
    writer = LexicalIndex(path=tmp_path / "pattern")
    writer.add(_corpus().items())
    writer.commit()
    readers = [LexicalIndex(path=tmp_path / "pattern", writer=False) for _ in range(2)]
    expected = _answers(writer)
    assert any(hits for hits, _ in expected)
    for reader in readers:
        assert not reader.writable
        assert len(reader) == len(writer) == 400
        assert _answers(reader) == expected
    with pytest.raises(RuntimeError, match="reading"):
        readers[0].add([(1, {"title": "no"})])


def test_a_commit_shows_in_a_reader_after_reload(tmp_path: Path) -> None:
    writer = LexicalIndex(path=tmp_path / "pattern")
    writer.add([(1, {"title": "zeppelin mooring"}), (2, {"title": "backup rotation"})])
    writer.commit()
    reader = LexicalIndex(path=tmp_path / "pattern", writer=False)
    writer.add([(3, {"title": "zeppelin hangar"}), (1, {"title": "airship mooring"})])
    writer.remove([2])
    writer.commit()
    # The reader searches the commit it opened until it reloads.
    assert [d for d, _ in reader.search("zeppelin", 5)] == [1]
    assert [d for d, _ in reader.search("backup", 5)] == [2]
    reader.reload()
    assert [d for d, _ in reader.search("zeppelin", 5)] == [3]
    assert reader.search("backup", 5) == []
    assert reader.search("airship", 5) == writer.search("airship", 5)
    assert len(reader) == 2


def test_one_writer_per_folder_and_it_can_be_handed_on(tmp_path: Path) -> None:
    first = LexicalIndex(path=tmp_path / "pattern")
    second = LexicalIndex(path=tmp_path / "pattern", writer=False)
    with pytest.raises(WriterBusy):
        second.open_writer()
    first.add([(1, {"title": "zeppelin"})])
    first.close_writer()  # not committed: dropped
    second.open_writer()
    second.add([(2, {"title": "zeppelin"})])
    second.commit()
    second.close_writer()
    first.reload()
    assert [d for d, _ in first.search("zeppelin", 5)] == [2]


def test_scores_on_disk_equal_those_in_memory(tmp_path: Path) -> None:
    """The same documents, added and changed the same way, give the same
    hits and the same scores to the bit, in memory and in a folder (read by
    another opening of it)."""
    docs = _corpus()
    memory = LexicalIndex()
    disk = LexicalIndex(path=tmp_path / "pattern")
    items = list(docs.items())
    for index in (memory, disk):
        for start in range(0, len(items), 100):  # as a build adds them
            index.add(items[start : start + 100])
        index.commit()
    reader = LexicalIndex(path=tmp_path / "pattern", writer=False)
    assert _answers(reader) == _answers(memory)
    # Then followed edits: on disk with a writer opened for each update, as
    # the node's index is followed.
    edits = [(5, {"title": "zeppelin zeppelin", "content": "backup"}), (7, docs[9])]
    memory.add(edits)
    memory.remove([11, 12])
    memory.commit()
    disk.close_writer()
    disk.open_writer()
    disk.add(edits)
    disk.remove([11, 12])
    disk.commit()
    disk.close_writer()
    reader.reload()
    assert _answers(reader) == _answers(memory)
