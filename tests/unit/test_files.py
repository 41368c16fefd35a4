"""LocalFileStore: paths of one exact shape, atomic writes, an agent's folder removed whole."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import pytest

from storage.files import InvalidPath, LocalFileStore, is_valid_path, new_path, owner_of

AGENT = uuid.UUID("6f1c2d4e-8a9b-4c3d-9e0f-112233445566")


@pytest.fixture
def store(tmp_path: Path) -> LocalFileStore:
    return LocalFileStore(tmp_path / "uploads")


def test_new_paths_are_valid_unique_and_owned() -> None:
    paths = {new_path(AGENT, "png") for _ in range(100)}
    assert len(paths) == 100
    for path in paths:
        assert is_valid_path(path) and path.startswith(f"{AGENT}/") and path.endswith(".png")
        assert owner_of(path) == AGENT
    with pytest.raises(InvalidPath):
        new_path(AGENT, "html")


def test_save_read_delete(store: LocalFileStore) -> None:
    path = new_path(AGENT, "jpg")
    assert store.read(path) is None
    store.save(path, b"\xff\xd8\xff bytes")
    assert store.read(path) == b"\xff\xd8\xff bytes"
    assert (store.root / path).read_bytes() == b"\xff\xd8\xff bytes"
    assert store.delete(path) is True
    assert store.delete(path) is False
    assert store.read(path) is None


@pytest.mark.parametrize(
    "path",
    [
        "../../etc/passwd",
        "/etc/passwd",
        f"{AGENT}/../../etc/passwd",
        f"{AGENT}/{'a' * 32}.png/../../x",
        f"{AGENT}\\{'a' * 32}.png",
        f"..\\..\\{'a' * 32}.png",
        f"{AGENT}/{'a' * 32}.html",
        f"{AGENT}/{'A' * 32}.png",
        f"{AGENT}/{'a' * 31}.png",
        f"{AGENT}/./{'a' * 32}.png",
        f"{AGENT}//{'a' * 32}.png",
        f"{str(AGENT).upper()}/{'a' * 32}.png",
        f"{AGENT}/{'a' * 32}.png\n",
        f"{AGENT}/{'a' * 32}.png\x00.txt",
        f"x/{AGENT}/{'a' * 32}.png",
        f"{'a' * 32}.png",
        "",
    ],
)
def test_any_other_path_is_refused(store: LocalFileStore, path: str) -> None:
    assert not is_valid_path(path)
    for call in (lambda: store.save(path, b"x"), lambda: store.read(path)):
        with pytest.raises(InvalidPath):
            call()
    with pytest.raises(InvalidPath):
        store.delete(path)
    assert not store.root.exists() or not any(store.root.rglob("*"))


def test_a_folder_linked_outside_the_root_is_refused(store: LocalFileStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / f"{'b' * 32}.png"
    secret.write_bytes(b"secret")
    store.root.mkdir(parents=True)
    (store.root / str(AGENT)).symlink_to(outside, target_is_directory=True)
    path = f"{AGENT}/{'b' * 32}.png"
    with pytest.raises(InvalidPath):
        store.read(path)
    with pytest.raises(InvalidPath):
        store.delete(path)
    with pytest.raises(InvalidPath):
        store.save(path, b"overwrite")
    # Removing the agent's folder removes the link, never what it points at.
    assert store.delete_owner(AGENT) == 0
    assert secret.read_bytes() == b"secret"
    assert not (store.root / str(AGENT)).exists()


def test_save_is_atomic(store: LocalFileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    path = new_path(AGENT, "png")
    store.save(path, b"first version")

    # A crash half-way through writing the next version: fsync fails after
    # part of the data went out.
    def failing_fsync(fd: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk gone"):
        store.save(path, b"second version, much longer than the first")
    monkeypatch.undo()
    assert store.read(path) == b"first version"
    # No temporary file is left behind.
    assert sorted(p.name for p in (store.root / str(AGENT)).iterdir()) == [path.split("/")[1]]


def test_readers_never_see_half_a_file(store: LocalFileStore) -> None:
    path = new_path(AGENT, "gif")
    small, large = b"a" * 10, b"b" * 4_000_000
    store.save(path, small)
    seen: set[bytes] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            data = store.read(path)
            assert data is not None
            seen.add(data[:1] + str(len(data)).encode())

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(10):
            store.save(path, large)
            store.save(path, small)
    finally:
        stop.set()
        thread.join()
    assert seen <= {b"a10", b"b4000000"}


def test_delete_owner_removes_only_that_agents_folder(store: LocalFileStore) -> None:
    other = uuid.uuid4()
    mine = [new_path(AGENT, ext) for ext in ("png", "jpg", "svg")]
    theirs = new_path(other, "webp")
    for path in [*mine, theirs]:
        store.save(path, b"data")
    assert store.delete_owner(AGENT) == 3
    assert not (store.root / str(AGENT)).exists()
    assert all(store.read(path) is None for path in mine)
    assert store.read(theirs) == b"data"
    assert store.delete_owner(AGENT) == 0
    assert store.delete_owner(uuid.uuid4()) == 0


def test_save_creates_the_root(tmp_path: Path) -> None:
    store = LocalFileStore(tmp_path / "a" / "b" / "uploads")
    path = new_path(AGENT, "webp")
    store.save(path, b"RIFF")
    assert store.read(path) == b"RIFF"
    assert oct((store.root / path).stat().st_mode & 0o777) == oct(0o644)
