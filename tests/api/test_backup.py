"""`cairn backup` and `cairn restore`, round trip: content made through the
API is dumped (pg_dump of the bundled tools, one snapshot) with the uploaded
files and the HMAC key, restored into a fresh state folder with a new
embedded Postgres, and compared table by table (counts and a checksum of
every row), file by file; the restored service accepts the old API keys and
serves the old uploads. A restore over a database that has tables is refused
without --force."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from serve_app.app import create_app
from serve_app.runtime.dispatch import LocalDispatch
from serve_app.settings import load_or_create_secret
from storage import backup
from storage.db import libpq_url
from storage.embedded import start_embedded, stop_server
from storage.files import LocalFileStore, PostgresFileStore
from tests.api.conftest import SECRET, StoreProbe, make_settings, register
from tests.api.test_comments import comment
from tests.api.test_follows import follow
from tests.api.test_patterns import publish
from tests.api.test_uploads import image_bytes, uploaded
from tests.conftest import REPO


def cairn(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The real command, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "serve_app.launch.cli", *args],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def table_sums(url: str) -> dict[str, tuple[int, str]]:
    """Per table: (rows, md5 over every row's text, in a fixed order)."""
    out = {}
    with psycopg.connect(libpq_url(url)) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        ]
        for table in tables:
            row = conn.execute(
                f"SELECT count(*), md5(coalesce(string_agg(md5(t::text), '' ORDER BY "
                f"md5(t::text)), '')) FROM public.\"{table}\" t"
            ).fetchone()
            assert row is not None
            out[table] = (int(row[0]), str(row[1]))
    return out


def file_sums(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def fresh_state() -> Iterator[Path]:
    """A state folder for the restore, with its own embedded Postgres (under
    .cairn/: pytest's tmp folders are closed to the server's own user)."""
    state = REPO / ".cairn" / f"restore-{secrets.token_hex(4)}"
    try:
        yield state
    finally:
        stop_server(state)
        shutil.rmtree(state, ignore_errors=True)


async def test_backup_and_restore_round_trip(
    client: httpx.AsyncClient,
    database: str,
    store: StoreProbe,
    tmp_path: Path,
    fresh_state: Path,
) -> None:
    # Content, through the API: agents, patterns, comments, votes, a follow, an upload.
    ada, bob = await register(client, "Ada"), await register(client, "Bob")
    pattern = await publish(client, ada, title="Backups that restore")
    await publish(client, bob, title="Second pattern to keep")
    await comment(client, bob, pattern["id"], "Tested the restore too.")
    vote = await client.post(
        f"/api/patterns/{pattern['id']}/vote", headers=bob.auth, json={"vote_type": "upvote"}
    )
    assert vote.status_code == 200
    assert (await follow(client, bob, ada)).status_code in (200, 201)
    image = image_bytes("PNG")
    upload = await uploaded(client, ada, image)
    dispatch = client._transport.app.state.ctx.dispatch  # type: ignore[attr-defined]
    assert isinstance(dispatch, LocalDispatch)
    await dispatch.settle()  # the fan-out done: nothing changes under the comparison

    # The source state folder: the HMAC key the app uses and, with the local
    # store, the uploaded files (the Postgres store keeps them in upload_chunks).
    source_state = tmp_path
    local = store.kind == "local"
    if local:
        assert store.root == source_state / "uploads"
    (source_state / "secret_key").write_text(SECRET.decode())
    before = table_sums(database)
    files_before = file_sums(store.root) if local else {}
    assert before["patterns"][0] == 2 and before["uploads"][0] == 1
    assert before["upload_chunks"][0] == (0 if local else 1)

    backup_dir = tmp_path / "backup"
    made = cairn(
        "backup",
        str(backup_dir),
        env={"CAIRN_DATABASE_URL": database, "CAIRN_STATE_DIR": str(source_state)},
    )
    assert made.returncode == 0, made.stderr + made.stdout
    assert "cairn backup: dumped public.patterns" in made.stdout  # progress is shown
    manifest = json.loads((backup_dir / "manifest.json").read_text())
    revision = (
        psycopg.connect(libpq_url(database))
        .execute("SELECT version_num FROM alembic_version")
        .fetchone()
    )
    assert revision is not None and manifest["alembic_revision"] == revision[0]
    assert manifest["database"]["tables"] == {t: n for t, (n, _) in before.items()}
    assert manifest["secret_key"] is True
    if local:
        assert manifest["files"]["uploads"]["count"] == 1
    else:
        assert "uploads" not in manifest["files"]
    assert oct(backup_dir.stat().st_mode & 0o777) == "0o700"

    env = {"CAIRN_STATE_DIR": str(fresh_state)}
    env_without_url = {k: v for k, v in os.environ.items() if k != "CAIRN_DATABASE_URL"}
    restored = subprocess.run(
        [sys.executable, "-m", "serve_app.launch.cli", "restore", str(backup_dir)],
        env={**env_without_url, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert restored.returncode == 0, restored.stderr + restored.stdout
    assert "migrations applied" in restored.stdout

    url = start_embedded(fresh_state)  # the restored server (its command has exited)
    assert table_sums(url) == before
    if local:
        assert file_sums(fresh_state / "uploads") == files_before
    else:
        assert not (fresh_state / "uploads").exists()

    # The restored service: the old key works, the old upload is served.
    app = create_app(
        make_settings(state_dir=str(fresh_state)),
        database_url=url,
        secret=load_or_create_secret(fresh_state).encode(),
        files=LocalFileStore(fresh_state / "uploads") if local else PostgresFileStore(),
        pool_size=2,
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as restored_api:
            me = await restored_api.get("/api/agents/me", headers=ada.auth)
            assert me.status_code == 200 and me.json()["data"]["username"] == ada.username
            served = await restored_api.get(f"/uploads/{upload['path']}")
            assert served.status_code == 200 and served.content == image

    if not local:
        # What follows (refusals, --force, a tampered backup, another key)
        # treats every table alike, wherever the uploads live: it runs once,
        # with the local store, the one that has files to put back too.
        return

    # Again over the restored (non-empty) database: refused, nothing touched.
    # (Compared with the database as the restored service left it: its
    # request recorded the key's use, api_keys.last_used_at.)
    served_state = table_sums(url)
    again = subprocess.run(
        [sys.executable, "-m", "serve_app.launch.cli", "restore", str(backup_dir)],
        env={**env_without_url, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 1 and "refusing to overwrite" in again.stderr
    assert "--force" in again.stderr
    assert table_sums(url) == served_state

    def restore_forced(source: Path, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "serve_app.launch.cli", "restore", "--force", str(source)],
            env={**env_without_url, "PYTHONPATH": str(REPO), **env, **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )

    # --force: after a change, the database is put back as the backup has it.
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute("DELETE FROM comments")
    changed = table_sums(url)
    # Not under a running service (here: a session connected to the database).
    with psycopg.connect(libpq_url(url)):
        busy = restore_forced(backup_dir)
    assert busy.returncode == 1 and "stop the service first" in busy.stderr
    assert table_sums(url) == changed
    # A backup that does not check out changes nothing, even with --force: the
    # target's tables were only moved aside, and are put back.
    broken = tmp_path / "broken"
    shutil.copytree(backup_dir, broken)
    tampered = json.loads((broken / "manifest.json").read_text())
    tampered["database"]["tables"]["patterns"] += 1
    (broken / "manifest.json").write_text(json.dumps(tampered))
    failed = restore_forced(broken)
    assert failed.returncode == 1 and "row counts differ" in failed.stderr
    assert table_sums(url) == changed
    assert not (fresh_state / "uploads.restoring").exists()
    # Nor does a CAIRN_SECRET_KEY that is not the backup's key.
    other_key = restore_forced(backup_dir, CAIRN_SECRET_KEY="x" * 64)
    assert other_key.returncode == 1 and "CAIRN_SECRET_KEY" in other_key.stderr
    assert table_sums(url) == changed
    # This node's BM25 indexes are a cache of the database: rebuilt, not kept
    # (another host's folder on a shared base stays); and a partial copy of
    # the uploads left by a killed restore never replaces the live ones.
    stale_index = fresh_state / "bm25" / socket.gethostname() / "index"
    stale_index.parent.mkdir(parents=True)
    stale_index.write_text("from before the restore")
    other_host = fresh_state / "bm25" / "another-host" / "index"
    other_host.parent.mkdir(parents=True)
    other_host.write_text("another node's")
    leftover = fresh_state / "uploads.restoring" / "partial"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("a killed restore's partial copy")
    forced = restore_forced(backup_dir)
    assert forced.returncode == 0, forced.stderr + forced.stdout
    assert "moving the target's tables aside" in forced.stdout
    assert f"DROP SCHEMA {backup.ASIDE} CASCADE" in forced.stdout
    assert table_sums(url) == before
    assert not stale_index.parent.exists() and other_host.exists()
    assert not (fresh_state / "uploads.restoring").exists()
    if local:
        assert file_sums(fresh_state / "uploads") == files_before


def test_a_database_password_stays_off_the_command_line() -> None:
    conninfo, env = backup._connection("postgresql://cairn:s3cret@db.example:5433/cairn")
    assert "s3cret" not in conninfo and env["PGPASSWORD"] == "s3cret"
    assert "host=db.example" in conninfo and "port=5433" in conninfo
