"""The node's BM25 folder (retrieval/lexical_store.py): its writer lock, its
state, its generations; real tantivy and real processes over a temp folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from retrieval.lexical import LexicalIndex, LexicalParams, WriterBusy
from retrieval.lexical_store import (
    FileLock,
    NodeStore,
    StoreState,
    store_key,
)

KINDS = ("pattern", "agent")
ROOT = str(Path(__file__).resolve().parents[2])


def _holder(code: str) -> subprocess.Popen[str]:
    """A Python process that runs ``code`` (which takes a lock), prints
    "held" and sleeps until killed."""
    script = textwrap.dedent(code) + "\nprint('held', flush=True)\nimport time\ntime.sleep(600)\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def _until(check: object, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.02)


def test_the_writer_lock_passes_on_when_its_holder_dies(tmp_path: Path) -> None:
    store = NodeStore(tmp_path, "key", KINDS)
    holder = _holder(
        f"""
        from retrieval.lexical_store import NodeStore
        store = NodeStore({str(tmp_path)!r}, "key", {KINDS!r})
        assert store.writer_lock.acquire()
        """
    )
    try:
        assert not store.writer_lock.acquire()
        with pytest.raises(RuntimeError, match="writer lock"):
            store.write(StoreState("g-1", 1, 10))
    finally:
        # Killed, not asked to stop: the kernel drops its lock.
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    _until(store.writer_lock.acquire)
    store.write(StoreState("g-1", 1, 10))
    assert store.read() == StoreState("g-1", 1, 10)
    # Not re-entrant; free again once released.
    assert not store.writer_lock.acquire()
    other = NodeStore(tmp_path, "key", KINDS)
    assert not other.writer_lock.acquire()
    store.writer_lock.release()
    assert other.writer_lock.acquire()
    other.writer_lock.release()


def test_tantivys_writer_lock_passes_on_when_its_holder_dies(tmp_path: Path) -> None:
    folder = tmp_path / "pattern"
    LexicalIndex(path=folder).close_writer()
    holder = _holder(
        f"""
        from retrieval.lexical import LexicalIndex
        index = LexicalIndex(path={str(folder)!r})
        index.add([(1, {{"title": "zeppelin"}})])
        index.commit()
        """
    )
    reader = LexicalIndex(path=folder, writer=False)
    try:
        with pytest.raises(WriterBusy):
            reader.open_writer()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    # What the dead writer committed stays; its lock went with it.
    reader.reload()
    assert [d for d, _ in reader.search("zeppelin", 5)] == [1]
    reader.open_writer()
    reader.add([(2, {"title": "zeppelin"})])
    reader.commit()
    reader.close_writer()
    assert len(reader) == 2


def test_state_round_trip_and_cache(tmp_path: Path) -> None:
    store = NodeStore(tmp_path, "key", KINDS)
    assert store.read() is None
    state = StoreState("g-1", 3, 120, frozenset({4, 5}), read_at=1000.5, commits=2)
    assert store.writer_lock.acquire()
    store.write(state)
    assert store.read() == state
    # Another process's view: the same.
    assert NodeStore(tmp_path, "key", KINDS).read() == state
    newer = StoreState("g-2", 4, 130)
    store.write(newer)
    assert store.read() == newer
    store.writer_lock.release()
    # A state of another format, or garbage, is no state: the reader builds.
    (store.dir / "state.json").write_text('{"format": 0}')
    assert NodeStore(tmp_path, "key", KINDS).read() is None
    (store.dir / "state.json").write_text("{not json")
    assert NodeStore(tmp_path, "key", KINDS).read() is None


def test_generations_open_and_sweep(tmp_path: Path) -> None:
    store = NodeStore(tmp_path, "key", KINDS)
    old = store.begin()
    indexes = store.open(old.name, writer=True)
    assert set(indexes) == set(KINDS)
    indexes["pattern"].add([(1, {"title": "zeppelin"})])
    indexes["pattern"].commit()
    for index in indexes.values():
        index.close_writer()
    old.release()
    readers = store.open(old.name)
    current = store.begin()
    current.release()
    building = store.begin()  # another process's build in progress
    assert store.sweep(keep=current.name) == [old.name]
    assert store.generations() == sorted([current.name, building.name])
    # A process still searching the swept generation keeps its mapped files.
    assert [d for d, _ in readers["pattern"].search("zeppelin", 5)] == [1]
    with pytest.raises(FileNotFoundError):
        store.open(old.name)
    building.release()
    assert store.sweep(keep=current.name) == [building.name]


def test_stale_key_folders_are_swept(tmp_path: Path) -> None:
    mine = NodeStore(tmp_path, "mine", KINDS)
    stale = NodeStore(tmp_path, "stale", KINDS)
    recent = NodeStore(tmp_path, "recent", KINDS)
    for store in (stale, recent):
        assert store.writer_lock.acquire()
        store.write(StoreState("g-1", 1, 1))
        store.writer_lock.release()
    day_ago = time.time() - 2 * 86_400
    os.utime(stale.dir / "state.json", (day_ago, day_ago))
    assert mine.sweep_keys() == ["stale"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recent"]


def test_the_key_names_database_and_index_format() -> None:
    assert store_key("a/db/1") == store_key("a/db/1")
    assert store_key("a/db/1") != store_key("a/db/2")
    assert store_key("a/db/1") != store_key("a/db/1", LexicalParams(weights={"title": 1}))


def test_file_lock_in_one_process(tmp_path: Path) -> None:
    one, two = FileLock(tmp_path / "x.lock"), FileLock(tmp_path / "x.lock")
    assert one.acquire() and one.held
    assert not two.acquire()
    one.release()
    assert two.acquire()
    two.release()
