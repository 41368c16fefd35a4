"""Bookkeeping of the embedded Postgres' users (no server needed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from storage.embedded import database_url, prune_dead_handles


def test_dead_processes_are_forgotten(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(dead.stdout)
    handles = tmp_path / ".handle_pids.json"
    handles.write_text(json.dumps([dead_pid, os.getpid()]))
    assert prune_dead_handles(tmp_path) == [dead_pid]
    assert json.loads(handles.read_text()) == [os.getpid()]
    assert prune_dead_handles(tmp_path) == []


def test_missing_or_broken_handle_file_is_harmless(tmp_path: Path) -> None:
    assert prune_dead_handles(tmp_path) == []
    (tmp_path / ".handle_pids.json").write_text("{not json")
    assert prune_dead_handles(tmp_path) == []


def test_database_url_swaps_only_the_database() -> None:
    assert database_url("postgresql://postgres:@/postgres?host=/s/pgdata", "x") == (
        "postgresql://postgres:@/x?host=/s/pgdata"
    )
    assert database_url("postgresql://u:p@db:5432/postgres", "t") == "postgresql://u:p@db:5432/t"


def test_long_state_folders_get_short_socket_dirs(tmp_path: Path) -> None:
    from serve_app.launch.bootstrap import haproxy_dir, ray_dir

    deep = tmp_path / ("x" * 60) / "state"
    hap, ray = haproxy_dir(deep), ray_dir(deep)
    try:
        for folder, limit, real in ((hap, 26, "haproxy"), (ray, 40, "ray/tmp")):
            assert len(str(folder)) <= limit
            assert folder.is_symlink() and folder.resolve() == deep.resolve() / real
        # Stable: the same folder gives the same link.
        assert (haproxy_dir(deep), ray_dir(deep)) == (hap, ray)
    finally:
        hap.unlink()
        ray.unlink()
    short = Path(tempfile.mkdtemp(prefix="c", dir="/tmp"))  # /tmp/cXXXXXXXX: 17 characters
    try:
        assert haproxy_dir(short) == short / "haproxy"
    finally:
        shutil.rmtree(short)


def test_socket_paths_fit_for_every_state_folder_length() -> None:
    """The longest sockets HAProxy and Ray create stay within their limits, on
    both sides of the point where the short symlink takes over."""
    from serve_app.launch.bootstrap import haproxy_dir, ray_dir

    session = "session_2026-11-21_16-12-20_286518_4194304"
    base = Path(tempfile.mkdtemp(prefix="c", dir="/tmp"))
    made: list[Path] = []
    try:
        for extra in range(0, 40):
            state = base / ("s" * extra) if extra else base
            hap, ray = haproxy_dir(state), ray_dir(state)
            made += [hap, ray]
            assert len(f"{hap}/{'n' * 56}/metrics.sock") <= 97, hap
            assert len(f"{ray}/{session}/sockets/plasma_store") <= 107, ray
    finally:
        for folder in made:
            if folder.is_symlink():
                folder.unlink()
        shutil.rmtree(base)
