"""Uploads in Postgres (the default store): chunked rows, streamed reads,
ETags, and moving files of the local-disk store in (`cairn uploads migrate`).
The behaviour both stores share is tested once per store in test_uploads.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from serve_app.app import file_store
from serve_app.launch.cli import _move_uploads
from storage.db import libpq_url
from storage.files import CHUNK_BYTES, LocalFileStore, PostgresFileStore
from storage.upload_migration import MoveReport, move_to_postgres
from tests.api.conftest import (
    StoreProbe,
    assert_error,
    make_settings,
    register,
    scalar,
    using_store,
)
from tests.api.test_uploads import SVG, assert_served, image_bytes, noise_png, served_path, uploaded
from tests.conftest import REPO


def chunk_rows(database: str, path: str) -> list[tuple[int, int]]:
    """(seq, length) of each chunk row of the upload at ``path``."""
    with psycopg.connect(libpq_url(database)) as conn:
        found = conn.execute(
            "SELECT c.seq, length(c.data) FROM upload_chunks c JOIN uploads u"
            " ON u.id = c.upload_id WHERE u.path = %s ORDER BY c.seq",
            (path,),
        ).fetchall()
    return [(int(seq), int(size)) for seq, size in found]


@pytest.fixture
def small_chunks(client: httpx.AsyncClient, database: str) -> Iterator[StoreProbe]:
    """The Postgres store with 1 KiB chunks: a small image spans many rows."""
    with using_store(client, database, PostgresFileStore(chunk_bytes=1024)) as probe:
        yield probe


def test_the_default_store_is_postgres_and_local_is_an_option(tmp_path: Path) -> None:
    assert isinstance(file_store(make_settings()), PostgresFileStore)
    local = file_store(make_settings(upload_store="local", state_dir=str(tmp_path)))
    assert isinstance(local, LocalFileStore) and local.root == tmp_path.resolve() / "uploads"
    with pytest.raises(ValueError, match="upload_store"):
        make_settings(upload_store="s3")


async def test_a_large_image_is_chunked_and_streamed_back_whole(
    client: httpx.AsyncClient, database: str
) -> None:
    # The session's app: the default store, 256 KiB chunks.
    agent = await register(client, "Big Picture")
    data = noise_png(400, 500)  # about 600 KB: three chunks
    assert 2 * CHUNK_BYTES < len(data) < 3 * CHUNK_BYTES
    result = await uploaded(client, agent, data)
    assert chunk_rows(database, result["path"]) == [
        (0, CHUNK_BYTES),
        (1, CHUNK_BYTES),
        (2, len(data) - 2 * CHUNK_BYTES),
    ]
    await assert_served(client, served_path(result), data, "image/png")
    response = await client.get(served_path(result))
    assert response.headers["content-length"] == str(len(data))


async def test_many_chunks_are_served_in_order(
    client: httpx.AsyncClient, database: str, small_chunks: StoreProbe
) -> None:
    agent = await register(client, "Many Rows")
    data = noise_png(40, 40)
    result = await uploaded(client, agent, data)
    rows = chunk_rows(database, result["path"])
    assert [seq for seq, _ in rows] == list(range(len(rows))) and len(rows) > 3
    assert sum(size for _, size in rows) == len(data)
    await assert_served(client, served_path(result), data, "image/png")
    # An image that fills its last chunk exactly ends there too.
    svg = SVG + b" " * (-len(SVG) % 1024)
    exact = await uploaded(client, agent, svg)
    assert all(size == 1024 for _, size in chunk_rows(database, exact["path"]))
    await assert_served(client, served_path(exact), svg, "image/svg+xml")


async def test_etag_and_if_none_match(client: httpx.AsyncClient, small_chunks: StoreProbe) -> None:
    agent = await register(client, "Cached")
    for data in (image_bytes("PNG"), noise_png(30, 30)):  # one chunk, and several
        result = await uploaded(client, agent, data)
        response = await client.get(served_path(result))
        name = result["path"].split("/")[1].split(".")[0]
        assert response.headers["etag"] == f'"{name}"'
        for tag in (f'"{name}"', f'"other", W/"{name}"', "*"):
            again = await client.get(served_path(result), headers={"If-None-Match": tag})
            assert again.status_code == 304 and again.content == b""
            assert again.headers["etag"] == f'"{name}"'
            assert "immutable" in again.headers["cache-control"]
        other = await client.get(served_path(result), headers={"If-None-Match": '"other"'})
        assert other.status_code == 200 and other.content == data


async def test_a_row_without_bytes_is_not_served(client: httpx.AsyncClient, database: str) -> None:
    agent = await register(client, "Unmoved")
    path = f"{agent.agent_id}/{'b' * 32}.png"
    with psycopg.connect(libpq_url(database)) as conn:
        conn.execute(
            "INSERT INTO uploads (id, agent_id, path, content_type, size) "
            "VALUES (gen_random_uuid(), %s, %s, 'image/png', 10)",
            (agent.agent_id, path),
        )
    assert_error(await client.get(f"/uploads/{path}"), 404, "not_found")


async def test_deleting_an_upload_deletes_its_chunks(
    client: httpx.AsyncClient, database: str, small_chunks: StoreProbe
) -> None:
    agent = await register(client, "Cleaner")
    result = await uploaded(client, agent, noise_png(30, 30))
    assert scalar(database, "SELECT count(*) FROM upload_chunks") > 1
    response = await client.request(
        "DELETE", "/api/upload", headers=agent.auth, json={"path": result["path"]}
    )
    assert response.status_code == 200, response.text
    assert scalar(database, "SELECT count(*) FROM upload_chunks") == 0
    assert_error(await client.get(served_path(result)), 404)


# --- moving the local-disk store's files into Postgres ----------------------


async def test_files_on_disk_move_into_postgres_once(
    client: httpx.AsyncClient, database: str, tmp_path: Path
) -> None:
    """Uploads made with the local store move in, are served from Postgres,
    and leave the folder; a second run finds nothing to do; a file without a
    row, or whose size disagrees with its row, stays on disk."""
    root = tmp_path / "uploads"
    agent = await register(client, "Old Timer")
    images = [image_bytes("PNG"), noise_png(300, 400), SVG]
    with using_store(client, database, LocalFileStore(root)) as disk:
        results = [await uploaded(client, agent, data) for data in images]
        assert len(disk.paths()) == 3
    orphan = f"{agent.agent_id}/{'c' * 32}.png"
    disk.files.save(orphan, image_bytes("PNG"))  # type: ignore[union-attr]
    # A row whose file does not match it (e.g. truncated by a bad copy).
    wrong = f"{agent.agent_id}/{'d' * 32}.gif"
    with psycopg.connect(libpq_url(database)) as conn:
        conn.execute(
            "INSERT INTO uploads (id, agent_id, path, content_type, size) "
            "VALUES (gen_random_uuid(), %s, %s, 'image/gif', 99999)",
            (agent.agent_id, wrong),
        )
    disk.files.save(wrong, image_bytes("GIF"))  # type: ignore[union-attr]

    seen: list[str] = []
    report = await move_to_postgres(database, root, progress=lambda r: seen.append(r.line()))
    assert (report.total, report.moved, report.already) == (5, 3, 0)
    assert report.bytes_moved == sum(len(d) for d in images)
    assert sorted(s.split(":")[0] for s in report.skipped) == sorted([orphan, wrong])
    assert seen and seen[-1].startswith("5/5 files: 3 moved")
    assert disk.paths() == sorted([orphan, wrong])

    with using_store(client, database, PostgresFileStore()) as pg:
        assert pg.paths() == sorted(r["path"] for r in results)
        for result, data in zip(results, images, strict=True):
            assert pg.read(result["path"]) == data
            await assert_served(client, served_path(result), data, result["contentType"])

    again = await move_to_postgres(database, root)
    assert (again.total, again.moved, again.already, len(again.skipped)) == (2, 0, 0, 2)


async def test_a_move_stopped_after_its_commit_resumes(
    client: httpx.AsyncClient, database: str, tmp_path: Path
) -> None:
    """A file whose chunks were committed but which was not yet removed (the
    move stopped in between) is only removed on the next run, not written twice."""
    root = tmp_path / "uploads"
    agent = await register(client, "Resumer")
    data = image_bytes("JPEG")
    with using_store(client, database, LocalFileStore(root)):
        result = await uploaded(client, agent, data)
    copy = tmp_path / "copy"
    copy.write_bytes((root / result["path"]).read_bytes())
    first = await move_to_postgres(database, root)
    assert first.moved == 1
    # Put the file back as if the removal had not happened.
    (root / result["path"]).parent.mkdir(parents=True, exist_ok=True)
    (root / result["path"]).write_bytes(copy.read_bytes())
    second = await move_to_postgres(database, root)
    assert (second.moved, second.already, second.skipped) == (0, 1, [])
    assert not (root / result["path"]).exists()
    assert chunk_rows(database, result["path"]) == [(0, len(data))]


async def test_cairn_uploads_migrate_command(
    client: httpx.AsyncClient, database: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    agent = await register(client, "Cli Mover")
    with using_store(client, database, LocalFileStore(state / "uploads")):
        result = await uploaded(client, agent, image_bytes("WEBP"))
    env = {
        **os.environ,
        "CAIRN_DATABASE_URL": database,
        "CAIRN_STATE_DIR": str(state),
        "PYTHONPATH": str(REPO),
    }
    command = [sys.executable, "-m", "serve_app.launch.cli", "uploads", "migrate"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "1/1 files: 1 moved" in done.stdout
    assert not (state / "uploads" / result["path"]).exists()
    assert chunk_rows(database, result["path"]) == [(0, len(image_bytes("WEBP")))]
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "nothing to move" in again.stdout
    # With the local store chosen there is nothing to move into Postgres.
    local = subprocess.run(
        command,
        env={**env, "CAIRN_UPLOAD_STORE": "local"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert local.returncode == 2 and "CAIRN_UPLOAD_STORE=local" in local.stderr


async def test_cairn_run_moves_files_at_start(
    client: httpx.AsyncClient, database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `cairn run` does before deploying: quiet with nothing to move,
    else the move with its progress."""
    state = tmp_path / "state"
    settings = make_settings(state_dir=str(state))
    assert await asyncio.to_thread(_move_uploads, settings, database, quiet=True) == 0
    assert capsys.readouterr().out == ""
    agent = await register(client, "Run Mover")
    with using_store(client, database, LocalFileStore(state / "uploads")):
        result = await uploaded(client, agent, image_bytes("GIF"))
    assert await asyncio.to_thread(_move_uploads, settings, database, quiet=True) == 0
    out = capsys.readouterr().out
    assert "moving 1 files" in out and "1/1 files: 1 moved" in out
    assert chunk_rows(database, result["path"]) == [(0, len(image_bytes("GIF")))]


def test_move_report_counts() -> None:
    report = MoveReport(total=3, moved=1, already=1, skipped=["x: no upload row"])
    assert report.done == 3 and report.line().startswith("3/3 files: 1 moved")
