"""Pair mining for ``cairn tune`` (embeddings/pairs.py): pure functions, no
database, no model."""

from __future__ import annotations

import pytest

from embeddings import pairs as P


def pattern(i: int, **kw: object) -> P.Item:
    title = kw.pop("title", f"Retry flaky HTTP calls with backoff variant {i}")
    description = kw.pop(
        "description", f"Wrap requests in a retry loop number {i}. It sleeps between tries."
    )
    content = kw.pop("content", f"def call_{i}(url):\n    for attempt in range(5):\n        pass")
    text = f"{title}\n{description}\npython, http\n{content}"
    return P.Item("pattern", f"p{i:04d}", str(title), str(description), text, **kw)  # type: ignore[arg-type]


def test_first_sentence() -> None:
    assert P.first_sentence("Parse a file. Then more.") == "Parse a file."
    assert P.first_sentence("\n  Line one without end\nline two") == "Line one without end"
    assert P.first_sentence("Version 1.2 is out! Yes") == "Version 1.2 is out!"


@pytest.mark.parametrize(
    ("document", "query", "gone", "kept"),
    [
        # verbatim, whatever the case and spacing
        ("Parse A   config file\nbody text here", "parse a config file", "config file", "body"),
        # a docstring line and a comment that repeat the query
        (
            'def f(path):\n    """Parse a config file."""\n    # parse the config file\n    '
            "return load(path)",
            "Parse the config file from disk",
            "config",
            "return load(path)",
        ),
    ],
)
def test_strip_query_removes_the_query_and_its_repeats(
    document: str, query: str, gone: str, kept: str
) -> None:
    out = P.strip_query(document, query)
    assert gone not in out.lower()
    assert kept in out


def test_strip_query_keeps_unrelated_lines() -> None:
    doc = "Title\n# open the socket and send bytes\nsock.send(b'x')"
    out = P.strip_query(doc, "Parse a config file")
    assert out == doc


def test_mine_pairs_titles_descriptions_answers_and_weights() -> None:
    items = [pattern(i) for i in range(60)]
    items[0] = pattern(0, worked=2)
    question = P.Item(
        "question",
        "q1",
        "How do I stream rows from Postgres without loading all of them",
        "I have a table with millions of rows and the process runs out of memory.",
        "How do I stream rows from Postgres without loading all of them\nI have a table with "
        "millions of rows and the process runs out of memory.",
    )
    answer = P.Answer(
        "q1",
        question.title,
        "Use a server-side cursor: conn.cursor(name='c') and fetchmany in a loop.",
        worked=1,
    )
    mined = P.mine([*items, question], [answer], min_pairs=10)
    every = mined.train + mined.heldout
    # Two queries per pattern (title, first sentence), the question, its answer.
    assert mined.pairs == 60 * 2 + 2
    assert mined.by_source == {"title": 60, "description": 60, "question": 1, "answer": 1}
    for pair in every:
        assert pair.query.lower() not in pair.document.lower()
    first = [p for p in every if p.group == "p0000"]
    assert {p.weight for p in first} == {P.VERIFIED_WEIGHT}
    assert {p.weight for p in every if p.group == "p0001"} == {1.0}
    qa = [p for p in every if p.group == "q1"]
    assert {p.source for p in qa} == {"question", "answer"}
    assert next(p for p in qa if p.source == "answer").weight == P.VERIFIED_WEIGHT


def test_duplicates_and_forks_collapse() -> None:
    items = [pattern(i) for i in range(30)]
    same_text = P.Item("pattern", "p9998", items[3].title, items[3].description, items[3].text)
    fork = pattern(3, content="def call_3(url):\n    changed = True")
    fork = P.Item("pattern", "p9999", fork.title, fork.description, fork.text, forked_from="p0003")
    mined = P.mine([*items, same_text, fork], min_pairs=10)
    assert mined.duplicates == 2
    assert mined.pairs == 60
    assert not [p for p in mined.train + mined.heldout if p.group in ("p9998", "p9999")]


def test_split_is_a_deterministic_tenth_by_group() -> None:
    mined = P.mine([pattern(i) for i in range(100)], min_pairs=10)
    again = P.mine(list(reversed([pattern(i) for i in range(100)])), min_pairs=10)
    assert {p.group for p in mined.heldout} == {p.group for p in again.heldout}
    assert len({p.group for p in mined.heldout}) == 10
    assert not {p.group for p in mined.heldout} & {p.group for p in mined.train}


def test_too_small_a_corpus_is_refused_naming_the_minimum() -> None:
    with pytest.raises(P.CorpusTooSmall, match=r"8 pairs mined from 4 visible items; at least 100"):
        P.mine([pattern(i) for i in range(4)])


def test_batches_never_hold_one_group_twice() -> None:
    items = [P.Pair(f"q{i}", f"d{i}", group=f"g{i % 7}") for i in range(70)]
    got = P.batches(items, 8, seed=3)
    assert sorted(i for b in got for i in b) == list(range(70))
    for b in got:
        groups = [items[i].group for i in b]
        assert len(groups) == len(set(groups)) and len(b) <= 8
    assert got == P.batches(items, 8, seed=3) != P.batches(items, 8, seed=4)


def test_function_pairs_drop_the_docstring() -> None:
    source = (
        "def load(path):\n"
        '    """Read the settings file and return its values.\n\n    More text.\n    """\n'
        "    # read the settings file and return its values\n"
        "    with open(path) as f:\n"
        "        return f.read()\n"
    )
    (pair,) = P.function_pairs(source, "py:x")
    assert pair.query == "Read the settings file and return its values."
    assert "settings" not in pair.document and "More text" not in pair.document
    assert pair.document.startswith("def load(path):") and "f.read()" in pair.document


def test_python_package_pairs_skip_excluded_packages() -> None:
    got = P.python_package_pairs(excluded=set(), limit=50, seed=1)
    assert len(got) == 50
    tops = {p.group.split(":")[1] for p in got}
    again = P.python_package_pairs(excluded={t.lower() for t in tops}, limit=50, seed=1)
    assert not {p.group.split(":")[1] for p in again} & tops


def test_eval_packages_reads_the_sets_sources() -> None:
    from benchmarks.ranking.hybrid import SETS

    names = P.eval_packages(SETS.values())
    assert {"numpy", "urllib3", "narwhals", "sqlalchemy"} <= names
    assert "cairn" not in names


def test_item_groups_put_forks_and_twins_in_their_origins_group() -> None:
    items = [pattern(i) for i in range(3)]
    twin = P.Item("pattern", "p0100", items[1].title, items[1].description, items[1].text)
    fork = P.Item("pattern", "p0101", "A fork", "Changed.", "other text", forked_from="p0002")
    fork_of_fork = P.Item("pattern", "p0102", "Again", "More.", "more text", forked_from="p0101")
    groups = P.item_groups([*items, twin, fork, fork_of_fork])
    assert groups == {
        "p0000": "p0000",
        "p0001": "p0001",
        "p0002": "p0002",
        "p0100": "p0001",
        "p0101": "p0002",
        "p0102": "p0002",
    }


def test_hard_negatives_are_the_nearest_documents_of_other_groups() -> None:
    """A tiny index on a circle: each query's negatives are the documents
    nearest it, best first, never one of its own group (its item, a fork,
    a twin), k at most; when its own group fills the nearest places the
    search goes on down the row."""
    import numpy as np

    def at(degrees: float) -> list[float]:
        r = np.radians(degrees)
        return [float(np.cos(r)), float(np.sin(r))]

    # Documents at 0, 10, 20, ... 190 degrees; the first twelve are group "a".
    index = np.array([at(10 * i) for i in range(20)], dtype=np.float32)
    groups = ["a"] * 12 + [f"g{i}" for i in range(12, 20)]
    texts = [f"doc {i}" for i in range(20)]
    pairs = [
        P.Pair("query near 0", "positive a", group="a"),
        P.Pair("query near 150", "positive b", group="g15"),
        P.Pair("no room", "positive c", group="g19"),
    ]
    queries = np.array([at(0), at(152), at(190)], dtype=np.float32)
    got = P.hard_negatives(pairs, queries, index, groups, texts, k=2)
    assert [p.query for p in got] == [p.query for p in pairs]
    # The nearest twelve are its own group: the next two come from deeper down.
    assert got[0].negatives == (("g12", "doc 12"), ("g13", "doc 13"))
    assert got[1].negatives == (("g16", "doc 16"), ("g14", "doc 14"))
    assert got[2].negatives == (("g18", "doc 18"), ("g17", "doc 17"))
    assert got[0].document == "positive a" and got[0].group == "a"
    assert P.hard_negatives(pairs, queries, index, groups, texts, k=0) == pairs
    # Fewer documents of other groups than k: all of them.
    assert (
        len(P.hard_negatives(pairs[:1], queries[:1], index, groups, texts, k=50)[0].negatives) == 8
    )
