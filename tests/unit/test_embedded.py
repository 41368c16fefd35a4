"""Bookkeeping of the embedded Postgres' users (no server needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
