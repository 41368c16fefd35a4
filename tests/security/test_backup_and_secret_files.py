"""Issue 30, finding 1: `cairn backup` writes only into a folder of its own,
and every secret file Cairn writes is owner-only (0600) from its creation.

A backup holds every account's data and the HMAC key. Made into a folder
another user created, that user owned the folder around the dump and the
key: they could read, swap or remove them. And secret files were written with
the default mode and narrowed by a chmod afterwards, so for a moment each was
as open as the umask allowed.

How "0600 from its creation" is observed (``watch_modes``): a file created
with a broader mode can only be narrowed by a chmod afterwards, and every
chmod (``os.chmod``, ``os.fchmod``, ``Path.chmod``, shutil's ``copymode``)
raises the ``os.chmod`` audit event *before* it acts. An audit hook that, at
every audit event in this process, looks at the watched files therefore sees
such a file with its creation mode at the latest when it is narrowed, as well
as at every later step (a link, a rename, an open). The tests run under a
umask of 0, so a file created without an explicit mode shows as 0666 there;
a file created with ``os.open(..., 0o600)`` is never seen broader than 0600.
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from serve_app.settings import load_or_create_secret
from storage import backup
from storage.embedded import database_url, drop_database, ensure_database
from storage.private_files import create_private, replace_private
from tests.conftest import REPO

NOBODY = 65534

# --- seeing a file's mode at every audited step ---------------------------------


class _Watch:
    def __init__(self, folder: Path, wanted: Callable[[str], bool]) -> None:
        self.folder = folder
        self.wanted = wanted
        self.seen: dict[str, set[int]] = {}
        self.busy = False


_active: list[_Watch] = []


def _hook(event: str, args: tuple[object, ...]) -> None:
    if not _active:
        return
    watch = _active[-1]
    if watch.busy:  # the hook's own scandir raises events too
        return
    watch.busy = True
    try:
        with os.scandir(watch.folder) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False) and watch.wanted(entry.name):
                    mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
                    watch.seen.setdefault(entry.name, set()).add(mode)
    except OSError:
        pass  # the folder is not there yet
    finally:
        watch.busy = False


sys.addaudithook(_hook)  # hooks cannot be removed: idle unless a test watches


@contextmanager
def watch_modes(folder: Path, wanted: Callable[[str], bool]) -> Iterator[_Watch]:
    """Every mode the wanted files of ``folder`` had at any audit event, under umask 0."""
    watch = _Watch(folder, wanted)
    old_umask = os.umask(0)
    _active.append(watch)
    try:
        yield watch
    finally:
        _active.remove(watch)
        os.umask(old_umask)


def _secret_like(name: str) -> bool:
    return "secret" in name


def assert_never_broader_than_0600(watch: _Watch) -> None:
    assert watch.seen, "no secret file was ever seen: the watch proves nothing"
    broader = {
        name: sorted(oct(m) for m in modes if m & 0o177) for name, modes in watch.seen.items()
    }
    assert not any(broader.values()), f"secret files seen with a broader mode: {broader}"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# --- the state folder's secret ----------------------------------------------------


def test_the_state_secret_is_0600_from_its_creation(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with watch_modes(state, _secret_like) as watch:
        value = load_or_create_secret(state)
    assert_never_broader_than_0600(watch)
    assert mode(state / "secret_key") == 0o600
    assert sorted(p.name for p in state.iterdir()) == ["secret_key"]  # no temporary left
    assert load_or_create_secret(state) == value


def test_the_watch_catches_a_chmod_after_the_write(tmp_path: Path) -> None:
    """The method itself: the writer this finding replaced is caught."""
    with watch_modes(tmp_path, _secret_like) as watch:
        path = tmp_path / "secret_key"
        path.write_text("value")
        path.chmod(0o600)
    assert mode(path) == 0o600  # its final mode alone would not tell
    with pytest.raises(AssertionError, match="broader mode"):
        assert_never_broader_than_0600(watch)


def test_private_files_are_never_written_through_what_is_there(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    link = tmp_path / "secret_link"
    link.symlink_to(victim)
    with pytest.raises(FileExistsError):
        create_private(link, b"key")
    with pytest.raises(FileExistsError):
        create_private(victim, b"key")
    assert victim.read_text() == "untouched"

    # A replacement is made beside and renamed over: the link itself is
    # replaced, its target untouched; 0600 from the creation.
    with watch_modes(tmp_path, _secret_like) as watch:
        replace_private(link, b"new key")
    assert_never_broader_than_0600(watch)
    assert not link.is_symlink() and link.read_bytes() == b"new key" and mode(link) == 0o600
    assert victim.read_text() == "untouched"


# --- the backup's own folder --------------------------------------------------------


def cairn(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "serve_app.launch.cli", *args],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def source(database: str, state: Path) -> backup.Source:
    return backup.Source(
        database_url=database,
        state_dir=state,
        embedded=False,
        secret_in_state=True,
        cairn_version="test",
    )


@pytest.fixture
def state(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    folder.mkdir()
    (folder / "secret_key").write_text("the-hmac-key-of-this-test-0123456789")
    os.chmod(folder / "secret_key", 0o600)
    return folder


def test_a_backup_into_a_folder_another_user_made_is_refused(
    database: str, tmp_path: Path, state: Path
) -> None:
    assert os.geteuid() != NOBODY
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chmod(theirs, 0o777)  # made open, for the operator to write into
    os.chown(theirs, NOBODY, NOBODY)
    made = cairn(
        "backup",
        str(theirs),
        env={"CAIRN_DATABASE_URL": database, "CAIRN_STATE_DIR": str(state)},
    )
    assert made.returncode != 0, made.stdout + made.stderr
    assert "another user" in made.stderr, made.stderr
    assert list(theirs.iterdir()) == []  # neither the dump nor the key went in
    assert theirs.stat().st_uid == NOBODY and mode(theirs) == 0o777


def test_a_backup_made_inside_a_folder_another_user_may_change_is_refused(
    database: str, tmp_path: Path, state: Path
) -> None:
    """Whoever owns the folder it is made in could swap the new folder for one
    of their own while the dump is written."""
    theirs = tmp_path / "shared"
    theirs.mkdir()
    os.chmod(theirs, 0o777)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(backup.BackupError, match="another user"):
        backup.backup(source(database, state), theirs / "backup", lambda _: None)
    assert list(theirs.iterdir()) == []

    # A folder anyone may write to, with no sticky bit, is refused as well.
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    os.chmod(open_folder, 0o777)
    with pytest.raises(backup.BackupError, match="other users may"):
        backup.backup(source(database, state), open_folder / "backup", lambda _: None)
    assert list(open_folder.iterdir()) == []


def test_a_symbolic_link_is_not_followed(database: str, tmp_path: Path, state: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "backup"
    link.symlink_to(elsewhere)
    with pytest.raises(backup.BackupError, match="symbolic link"):
        backup.backup(source(database, state), link, lambda _: None)
    assert list(elsewhere.iterdir()) == []


def test_a_backup_and_its_restore_write_owner_only_files(
    database: str, pg_admin_url: str, tmp_path: Path, state: Path
) -> None:
    """An empty folder of the caller's own is taken, closed to 0700; every
    file in it is owner-only, the key 0600 from its creation; the restore
    writes the key into the state folder the same way."""
    target = tmp_path / "mine"
    target.mkdir()
    os.chmod(target, 0o777)
    with watch_modes(target, _secret_like) as watch:
        manifest = backup.backup(source(database, state), target, lambda _: None)
    assert manifest["secret_key"] is True
    assert_never_broader_than_0600(watch)
    assert mode(target) == 0o700
    assert (target / "secret_key").read_text() == (state / "secret_key").read_text()
    for path in target.rglob("*"):
        assert not mode(path) & 0o077, f"{path} is open to others: {oct(mode(path))}"

    # The restore, into a new database and an empty state folder: the key is
    # written there, 0600 from its creation.
    name = f"cairn_restore_{secrets.token_hex(4)}"
    ensure_database(pg_admin_url, name)
    try:
        restored_state = tmp_path / "restored"
        restored_state.mkdir()
        into = backup.Target(database_url(pg_admin_url, name), restored_state, True)
        with watch_modes(restored_state, _secret_like) as restore_watch:
            backup.restore(target, into, lambda _: None, force=False)
        assert_never_broader_than_0600(restore_watch)
        assert mode(restored_state / "secret_key") == 0o600
        assert (restored_state / "secret_key").read_text() == (state / "secret_key").read_text()
        assert sorted(p.name for p in restored_state.iterdir()) == ["secret_key"]
    finally:
        drop_database(pg_admin_url, name)
