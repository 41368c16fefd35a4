"""When `cairn run` publishes the periodic export (docs/decisions/events.md,
"Export"): at start when none is published or the last is older than the
interval, else when the interval since it has passed; never when it is 0."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from serve_app.launch.cli import PeriodicExport
from serve_app.services.export import MANIFEST, published_path
from serve_app.settings import Settings


def exporter(state: Path, interval: float) -> PeriodicExport:
    return PeriodicExport(Settings(state_dir=state, export_interval_s=interval))


def publish(state: Path, age_s: float) -> None:
    folder = published_path(Settings(state_dir=state).export_path)
    folder.mkdir(parents=True)
    (folder / MANIFEST).write_text("{}")
    then = time.time() - age_s
    os.utime(folder / MANIFEST, (then, then))


@pytest.mark.parametrize(
    ("age_s", "due_in"),
    [(None, 0.0), (2 * 3600.0, 0.0), (600.0, 3000.0)],
)
def test_the_first_export_is_due_by_the_age_of_the_last(
    tmp_path: Path, age_s: float | None, due_in: float
) -> None:
    if age_s is not None:
        publish(tmp_path, age_s)
    started = time.monotonic()
    periodic = exporter(tmp_path, 3600.0)
    assert periodic.due - started == pytest.approx(due_in, abs=5.0)


def test_an_interval_of_0_never_exports(tmp_path: Path) -> None:
    periodic = exporter(tmp_path, 0.0)
    periodic.tick()
    assert periodic.running is None


def test_the_export_folder_is_the_state_folders_unless_named(tmp_path: Path) -> None:
    state = Settings(state_dir=tmp_path)
    assert state.export_path == state.state_path / "export"
    shared = Settings(state_dir=tmp_path, export_dir=tmp_path / "shared")
    assert shared.export_path == (tmp_path / "shared").resolve()
