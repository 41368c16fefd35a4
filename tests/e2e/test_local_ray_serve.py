"""Issue 45, M1 and M5: the local Ray node `cairn run` starts, seen from the
outside while the shared service runs.

M1: every TCP listener of the service's process tree (the driver, the GCS,
the raylet, the agents, the workers, HAProxy) is on loopback, and Ray runs
with token authentication on a 0600 token of its own in the state folder.
M5: no folder of the state tree is world-writable without the sticky bit,
and a link planted under Ray's session folder, where Ray's own Prometheus
service-discovery writer wrote a fixed name, is never written through.
"""

from __future__ import annotations

import ipaddress
import os
import stat
import time
from pathlib import Path

import psutil
import pytest

from serve_app.launch.bootstrap import ray_dir, service_discovery_file
from serve_app.launch.local_ray import TOKEN_FILE
from tests.e2e.conftest import Service

pytestmark = pytest.mark.e2e


def tree(service: Service) -> list[psutil.Process]:
    root = psutil.Process(service.process.pid)
    return [root, *root.children(recursive=True)]


def tcp_listeners(service: Service) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket."""
    found = []
    for proc in tree(service):
        try:
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((proc.name(), conn.laddr.ip, conn.laddr.port))
        except psutil.NoSuchProcess:
            continue
    return found


def loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.is_loopback


def test_every_listener_of_the_local_ray_is_on_loopback(service: Service) -> None:
    found = tcp_listeners(service)
    names = {name for name, _, _ in found}
    # The parts the issue names are there to be looked at.
    assert {"gcs_server", "raylet"} <= names, found
    assert any(port == int(service.base_url.rsplit(":", 1)[1]) for _, _, port in found), found
    exposed = [entry for entry in found if not loopback(entry[1])]
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_ray_runs_with_a_private_token_of_its_own(service: Service) -> None:
    token = service.state_dir / TOKEN_FILE
    info = os.lstat(token)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert len(token.read_text().strip()) >= 32
    raylets = [p for p in tree(service) if p.name() == "raylet"]
    assert raylets
    for raylet in raylets:
        env = raylet.environ()
        assert env.get("RAY_AUTH_MODE") == "token"
        assert env.get("RAY_AUTH_TOKEN_PATH") == str(token)
        assert "RAY_AUTH_TOKEN" not in env


def open_folders(root: Path) -> list[str]:
    """Folders under ``root`` (links not followed) any user may write to and
    whose entries any user may therefore replace (no sticky bit)."""
    found = []
    for folder, _, _ in os.walk(root):  # never into a link
        mode = os.lstat(folder).st_mode
        if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
            found.append(f"{oct(stat.S_IMODE(mode))} {folder}")
    return found


def test_no_folder_of_the_state_tree_is_open_to_every_user(service: Service) -> None:
    # The service closes Ray's folders once Ray is up and again once it
    # serves; the health check that let this session start may come first.
    deadline = time.monotonic() + 60
    found = open_folders(service.state_dir)
    while found and time.monotonic() < deadline:
        time.sleep(0.5)
        found = open_folders(service.state_dir)
    assert not found, found


def test_a_link_planted_where_rays_writer_wrote_is_not_followed(
    service: Service, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    # Ray's writer wrote tmp_<name> in the session folder, then renamed it.
    session = ray_dir(service.state_dir) / "session_latest"
    planted = [
        session / "tmp_prom_metrics_service_discovery.json",
        session / "prom_metrics_service_discovery.json",
    ]
    for link in planted:
        link.unlink(missing_ok=True)
        link.symlink_to(victim)
    try:
        sd = service_discovery_file(service.state_dir)
        writes = 0
        last = sd.stat().st_mtime_ns if sd.exists() else None
        deadline = time.monotonic() + 30
        # Two rounds of the service's writer (every 5 s) after the links.
        while writes < 2:
            assert victim.read_text() == "precious", "the writer followed a planted link"
            assert time.monotonic() < deadline, f"{sd} was not rewritten"
            time.sleep(0.5)
            now = sd.stat().st_mtime_ns if sd.exists() else None
            if now is not None and now != last:
                writes += 1
                last = now
        assert victim.read_text() == "precious"
        assert not sd.is_symlink()
        assert stat.S_IMODE(os.lstat(sd.parent).st_mode) == 0o700
    finally:
        for link in planted:
            if link.is_symlink():
                link.unlink()
