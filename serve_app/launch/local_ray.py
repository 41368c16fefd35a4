"""The local Ray node ``cairn run`` starts (no ``RAY_ADDRESS``): reachable
from this machine's loopback only, authenticated by a token of its own, its
folders closed to other users (issue 45, M1 and M5;
docs/decisions/ray-cluster.md, "The local Ray node").

Ray resolves ``_node_ip_address="127.0.0.1"`` to the host's address unless
it believes it runs without a cluster: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
(read when ``ray`` is imported) makes the node's address loopback, and then
the GCS, the raylet, the workers, the dashboard agent (its job API
included), the runtime-env agent and the metrics exporters all bind there.
Whatever a later Ray does, ``cairn run`` lists the listeners of its process
tree once Ray is up and again once it serves, and refuses to go on while one
is elsewhere (``exposed``).

Ray makes its temp folder and every folder it creates under it mode 0777
without the sticky bit: ``close_folders`` narrows them once Ray has started
(and again while it runs), and the Prometheus service-discovery file is
written by ``write_private`` into a 0700 folder of its own, never through a
link.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from storage.private_files import create_private, replace_private, temporary_beside

log = logging.getLogger("cairn.local_ray")

TOKEN_FILE = "ray_auth_token"
# Read by ray._private.ray_constants when ray is imported; "0" makes Ray use
# the loopback address as the node's (ray._private.services.get_node_ip_address).
_NO_CLUSTER = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


class RayExposed(RuntimeError):
    """The local Ray listens beyond loopback."""


def private_folder(path: Path) -> Path:
    """``path``, a folder of this user's only (0700): created so, or an
    existing one narrowed; a link, another user's folder or a file there is
    refused."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise RuntimeError(f"{path} is not a folder (a link or a file is there); remove it")
    if info.st_uid != os.geteuid():
        raise RuntimeError(f"{path} belongs to another user (uid {info.st_uid})")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Put ``text`` at ``path`` in a 0700 folder: written under a new name
    (O_CREAT|O_EXCL|O_NOFOLLOW, 0600), then renamed over ``path``, so a link
    planted at either name is replaced, never written through."""
    private_folder(path.parent)
    replace_private(path, text.encode())


def ensure_token(state: Path) -> Path:
    """``<state>/ray_auth_token``: 256 random bits in hex, 0600 from its
    creation; an existing one is used if it is this user's own regular file
    that nobody else may read."""
    path = state / TOKEN_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        import secrets

        tmp = temporary_beside(path)
        create_private(tmp, secrets.token_hex(32).encode())
        try:
            os.link(tmp, path)  # fails if another process made one first
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        return ensure_token(state)
    except OSError as exc:  # ELOOP: a symbolic link is there
        raise RuntimeError(f"{path} is not a plain file ({exc}); remove it") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise RuntimeError(f"{path} is not a file of this user's; remove it")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise RuntimeError(
                f"{path} is readable by others (mode {oct(stat.S_IMODE(info.st_mode))}): "
                "anyone who read it can reach Ray; remove it (a new one is made)"
            )
        if not os.read(fd, 4096).strip():
            raise RuntimeError(f"{path} is empty; remove it")
    finally:
        os.close(fd)
    return path


def local_ray_env(state: Path) -> dict[str, str]:
    """Environment for a local Ray started by this process: loopback only,
    token authentication with ``ensure_token``'s token."""
    return {
        _NO_CLUSTER: "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(ensure_token(state)),
    }


def use_local_ray_env(state: Path) -> None:
    """Put ``local_ray_env`` into this process's environment (before Ray is
    imported): Ray's processes inherit it."""
    import sys

    if "ray._private.ray_constants" in sys.modules and _NO_CLUSTER not in os.environ:
        log.warning("ray was imported before %s was set: the listener check decides", _NO_CLUSTER)
    # A token in the environment wins over the file: this node uses the file.
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.update(local_ray_env(state))


@dataclass(frozen=True)
class Listener:
    pid: int
    name: str
    ip: str
    port: int

    def __str__(self) -> str:
        return f"{self.name} (pid {self.pid}) on {self.ip}:{self.port}"


def is_loopback(ip: str) -> bool:
    """127.0.0.0/8, ::1, or an IPv4 loopback address mapped into IPv6."""
    address = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.is_loopback


def process_tree(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and all its descendants."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def listeners(processes: Iterable[psutil.Process]) -> list[Listener]:
    """Every listening TCP socket of ``processes`` (those that exit meanwhile
    are skipped)."""
    found = []
    for proc in processes:
        try:
            name = proc.name()
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append(Listener(proc.pid, name, conn.laddr.ip, conn.laddr.port))
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


Public = tuple[str, set[int]]


def exposed(found: Iterable[Listener], public: Public | None = None) -> list[Listener]:
    """The listeners not on loopback, but for the service's own HTTP
    ``public`` (host, ports): what the operator chose to serve on."""
    out = []
    for listener in found:
        if is_loopback(listener.ip):
            continue
        if public is not None and listener.port in public[1]:
            host = public[0]
            if host in ("0.0.0.0", "::", "*", "") or listener.ip in (host, f"::ffff:{host}"):
                continue
        out.append(listener)
    return out


def check_loopback(pid: int, public: Public | None = None) -> list[Listener]:
    """The listeners of ``pid``'s process tree; ``RayExposed`` if one is
    beyond loopback (other than ``public``)."""
    found = listeners(process_tree(pid))
    bad = exposed(found, public)
    if bad:
        raise RayExposed(
            "the local Ray listens beyond loopback: "
            + "; ".join(map(str, bad))
            + ". A Ray reachable from other hosts must be a cluster of your own, "
            "on a private network (README, 'Running on a cluster'; RAY_ADDRESS)."
        )
    return found


def close_folders(root: Path) -> int:
    """``root`` to 0700 and every folder beneath it (links not followed)
    without write for group and others unless it has the sticky bit; how
    many were narrowed."""
    real = root.resolve()
    if not real.is_dir():
        return 0
    narrowed = 0
    if stat.S_IMODE(os.lstat(real).st_mode) != 0o700:
        os.chmod(real, 0o700)
        narrowed += 1
    for folder, dirs, _ in os.walk(real):
        for name in dirs:
            path = os.path.join(folder, name)
            try:
                mode = os.lstat(path).st_mode
                if stat.S_ISDIR(mode) and mode & 0o022 and not mode & stat.S_ISVTX:
                    os.chmod(path, stat.S_IMODE(mode) & ~0o022)
                    narrowed += 1
            except FileNotFoundError:
                continue  # removed meanwhile (a worker's folder)
    return narrowed
