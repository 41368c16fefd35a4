"""Issue 45, M1 and M5, the parts of serve_app/launch/local_ray.py that need
no Ray: the listener check (on the sockets of a child process of its own), the token file, the
discovery file's writer against planted links, and the folders' modes.
tests/e2e/test_local_ray_serve.py looks at the running service."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from replicas.loopback import node_address, on_loopback
from serve_app.launch.bootstrap import ray_dir, service_discovery_file
from serve_app.launch.local_ray import (
    TOKEN_FILE,
    Listener,
    RayExposed,
    check_loopback,
    close_folders,
    ensure_token,
    exposed,
    is_loopback,
    listeners,
    process_tree,
    write_private,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# A process of its own holding two listening sockets (never connected to):
# one on loopback, one on every interface. It prints their ports and waits
# for its standard input to close.
_LISTENER = """
import socket, sys
inside, outside = socket.socket(), socket.socket()
inside.bind(("127.0.0.1", 0)); outside.bind(("0.0.0.0", 0))
inside.listen(); outside.listen()
print(inside.getsockname()[1], outside.getsockname()[1], flush=True)
sys.stdin.read()
"""


@pytest.fixture
def two_sockets() -> Iterator[tuple[int, int, int]]:
    """(pid, loopback port, every-interface port) of a child process of its
    own: the check looks at that process alone, whatever else this test
    process (a whole suite's servers) listens on."""
    child = subprocess.Popen(
        [sys.executable, "-c", _LISTENER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        inside, outside = (int(port) for port in child.stdout.readline().split())
        yield child.pid, inside, outside
    finally:
        child.kill()
        child.wait(timeout=10)


def test_a_listener_beyond_loopback_is_refused(two_sockets: tuple[int, int, int]) -> None:
    pid, inside, outside = two_sockets
    found = listeners(process_tree(pid))
    ports = {listener.port: listener.ip for listener in found}
    assert ports == {inside: "127.0.0.1", outside: "0.0.0.0"}
    assert [listener.port for listener in exposed(found)] == [outside]
    with pytest.raises(RayExposed, match=f"0.0.0.0:{outside}"):
        check_loopback(pid)
    # The service's own HTTP address, where the operator chose to serve.
    assert check_loopback(pid, ("0.0.0.0", {outside}))
    with pytest.raises(RayExposed):
        check_loopback(pid, ("0.0.0.0", {inside}))


def test_loopback_is_told_from_the_rest() -> None:
    for ip in ("127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"):
        assert is_loopback(ip), ip
    for ip in ("0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "::ffff:10.0.0.5", "fe80::1%eth0"):
        assert not is_loopback(ip), ip
    found = [
        Listener(1, "raylet", "::ffff:127.0.0.1", 100),
        Listener(2, "gcs_server", "10.0.0.5", 6379),
        Listener(3, "haproxy", "10.0.0.5", 8000),
        Listener(4, "haproxy", "10.0.0.6", 8000),
    ]
    assert [x.pid for x in exposed(found)] == [2, 3, 4]
    assert [x.pid for x in exposed(found, ("10.0.0.5", {8000}))] == [2, 4]
    assert [x.pid for x in exposed(found, ("0.0.0.0", {8000}))] == [2]


def test_the_token_is_created_private_and_a_planted_one_is_refused(tmp_path: Path) -> None:
    path = ensure_token(tmp_path)
    assert path == tmp_path / TOKEN_FILE and mode(path) == 0o600
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0
    assert ensure_token(tmp_path) == path and path.read_text() == token  # kept

    other = tmp_path / "other"
    other.mkdir()
    (other / TOKEN_FILE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RuntimeError, match="not a plain file"):
        ensure_token(other)
    assert not (tmp_path / "elsewhere").exists()
    (other / TOKEN_FILE).unlink()
    (other / TOKEN_FILE).write_text("readable-by-all")
    os.chmod(other / TOKEN_FILE, 0o644)
    with pytest.raises(RuntimeError, match="readable by others"):
        ensure_token(other)


def test_the_discovery_writer_never_writes_through_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    state = tmp_path / "state"
    target = service_discovery_file(state)
    target.parent.mkdir(parents=True)
    os.chmod(target.parent, 0o777)
    target.symlink_to(victim)
    write_private(target, '[{"targets": []}]')
    assert victim.read_text() == "precious"
    assert not target.is_symlink() and target.read_text() == '[{"targets": []}]'
    assert mode(target) == 0o600 and mode(target.parent) == 0o700
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temp left

    # The folder itself a link: refused, nothing written where it points.
    moved = tmp_path / "moved"
    moved.mkdir()
    target.unlink()
    target.parent.rmdir()
    target.parent.symlink_to(moved, target_is_directory=True)
    with pytest.raises(RuntimeError, match="not a folder"):
        write_private(target, "[]")
    assert list(moved.iterdir()) == []


def test_rays_folders_are_closed_to_other_users(tmp_path: Path) -> None:
    state = tmp_path / "state"
    root = ray_dir(state).resolve()
    try:
        # Nobody else reaches Ray's folder, whatever Ray makes of it.
        assert mode(root.parent) == 0o700
        # What Ray makes as it starts: 0777 folders, no sticky bit.
        session = root / "session_1" / "logs" / "old"
        session.mkdir(parents=True)
        shared = root / "session_1" / "shared"
        shared.mkdir()
        outside = tmp_path / "outside"
        outside.mkdir()
        (root / "session_1" / "link").symlink_to(outside, target_is_directory=True)
        for folder in (root, root / "session_1", root / "session_1" / "logs", session, outside):
            os.chmod(folder, 0o777)
        os.chmod(shared, 0o1777)
        assert close_folders(root) == 4
        assert mode(root) == 0o700
        assert mode(root / "session_1") == mode(session) == 0o755
        assert mode(shared) == 0o1777  # sticky: entries stay their owners'
        assert mode(outside) == 0o777  # a link is not followed
        assert close_folders(root) == 0
    finally:
        link = ray_dir(state)
        if link.is_symlink():
            link.unlink()


def test_a_replicas_grpc_server_binds_the_loopback_node_address() -> None:
    # Ray Serve binds the replica's inter-deployment gRPC server on [::]:0.
    assert on_loopback("127.0.0.1") and on_loopback("::1")
    assert not on_loopback("10.0.0.5") and not on_loopback("not an address")
    assert node_address("[::]:0", "127.0.0.1") == "127.0.0.1:0"
    assert node_address("0.0.0.0:4000", "127.0.0.1") == "127.0.0.1:4000"
    assert node_address("[::]:0", "::1") == "[::1]:0"
    assert node_address("10.0.0.5:0", "127.0.0.1") == "10.0.0.5:0"
