"""Everything that happens once before serving: state folder, secret, database,
migrations, seed data, and the environment Ray and the replicas need."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serve_app.launch.edge_errors import CALLBACK_IMPORT_PATH, EDGE_BUFFER_BYTES
from serve_app.launch.local_ray import private_folder
from serve_app.settings import Settings, load_or_create_secret
from storage.embedded import start_embedded
from storage.migrate import upgrade
from storage.seed import seed_categories

log = logging.getLogger("cairn.bootstrap")


@dataclass(frozen=True)
class Prepared:
    database_url: str
    secret_key: str
    embedded: bool


def prepare(settings: Settings, *, migrate: bool = True, keep_db_running: bool = False) -> Prepared:
    """Idempotent: safe on every start and from several processes.

    ``keep_db_running``: an embedded Postgres started here outlives this
    process (stop it with ``cairn db stop``)."""
    state = settings.state_path
    state.mkdir(parents=True, exist_ok=True)
    secret = (
        settings.secret_key.get_secret_value()
        if settings.secret_key
        else load_or_create_secret(state)
    )
    embedded = settings.database_url is None
    url = settings.database_url or start_embedded(state, keep_running=keep_db_running)
    if migrate:
        upgrade(url)
        seed_categories(url)
    return Prepared(database_url=url, secret_key=secret, embedded=embedded)


# Unix socket paths are short. HAProxy refuses over 97 bytes; Ray Serve puts its
# sockets at "<folder>/<56-char node id>/admin.sock" (or metrics.sock): 97 - 70
# leaves 27, and we keep one spare. Ray's limit is 107 bytes under
# "<folder>/session_<date>_<time>_<usec>_<pid>/sockets/plasma_store" (≈ 64).
_HAPROXY_DIR_MAX = 26
_RAY_DIR_MAX = 40


def short_dir(real: Path, max_len: int, tag: str) -> Path:
    """``real`` (created), or a short symlink to it under the temp dir when its
    path is too long for the sockets that will live inside it."""
    real.mkdir(parents=True, exist_ok=True)
    if len(str(real)) <= max_len:
        return real
    digest = hashlib.sha1(str(real.resolve()).encode(), usedforsecurity=False).hexdigest()[:10]
    link = Path(tempfile.gettempdir()) / f"cairn-{tag}-{digest}"
    # Another user's link there (the name is predictable) could be turned
    # elsewhere later: only this user's own link is kept.
    if not (
        link.is_symlink()
        and os.lstat(link).st_uid == os.geteuid()
        and link.resolve() == real.resolve()
    ):
        link.unlink(missing_ok=True)
        link.symlink_to(real.resolve(), target_is_directory=True)
    return link


def haproxy_dir(state: Path) -> Path:
    """Where HAProxy's config and sockets live: ``<state>/haproxy`` (0700)."""
    private_folder(state / "haproxy")
    return short_dir(state / "haproxy", _HAPROXY_DIR_MAX, "hap")


def ray_dir(state: Path) -> Path:
    """Ray's temp folder (sessions, logs, sockets): ``<state>/ray/tmp``.

    Ray opens that folder and every one it makes in it to all users (0777,
    no sticky bit) as it starts; ``<state>/ray`` is this user's only (0700),
    so nobody else reaches them even before ``cairn run`` narrows them
    (serve_app/launch/local_ray.py, issue 45 M5)."""
    private_folder(state / "ray")
    return short_dir(state / "ray" / "tmp", _RAY_DIR_MAX, "ray")


def ray_env(settings: Settings) -> dict[str, str]:
    """Ray Serve settings that must be in the environment before Ray starts.

    HAProxy mode (the fastest correct set-up measured,
    docs/decisions/deployment-and-operations.md) with all of its ports and files
    moved into our config and state folder.
    """
    state = settings.state_path
    env = {
        "RAY_TMPDIR": str(ray_dir(state)),
        # Serve's proxy and the replicas' own HTTP servers answer timeouts,
        # backpressure and failures in JSON too (serve_app/launch/edge_errors.py).
        "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": CALLBACK_IMPORT_PATH,
    }
    # Defaults an operator may override in the environment
    # (docs/decisions/deployment-and-operations.md, "Serve path performance"):
    tunables = {
        # Ray starts every worker process at nice 15 (below its own daemons):
        # the Api replicas, HAProxy and the rate-limit and trending actors are
        # the service here, so they run at the priority of Postgres. At 15 a
        # replica gets about 1/28 of the CPU share of any ordinary process it
        # shares a core with.
        "RAY_worker_niceness": "0",
        # Work Serve does while idle: the controller's loop every 0.5 s instead
        # of 0.1 s, replica and handle metrics pushed every second instead of
        # every 0.1 s (idle Serve: 0.12 -> 0.09 of a core here).
        "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
        "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS": "1000",
    }
    env.update({k: os.environ.get(k, v) for k, v in tunables.items()})
    if settings.serve_proxy != "haproxy":
        return env
    hap = haproxy_dir(state)
    shim = Path(sys.executable).with_name("cairn-haproxy")
    env.update(
        {
            "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
            "RAY_SERVE_ENABLE_HA_PROXY": "1",
            "RAY_SERVE_HAPROXY_NBTHREAD": "2",
            # A request head HAProxy cannot buffer gets its built-in HTML 400,
            # which no config can replace (HAProxy 2.8); one that fits gets
            # JSON, a URI over 8 KiB a JSON 414 (serve_app/launch/edge_errors.py).
            "RAY_SERVE_HAPROXY_TUNE_BUFSIZE": os.environ.get(
                "RAY_SERVE_HAPROXY_TUNE_BUFSIZE", str(EDGE_BUFFER_BYTES)
            ),
            "RAY_SERVE_HAPROXY_METRICS_ENABLED": "0",
            "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(hap / "haproxy.cfg"),
            "RAY_SERVE_HAPROXY_SOCKET_PATH": str(hap / "admin.sock"),
            "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(hap),
            "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(hap / "server-state"),
            "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": str(hap / "metrics.sock"),
            "RAY_SERVE_HAPROXY_STATS_PORT": str(settings.haproxy_stats_port),
            "RAY_SERVE_HAPROXY_METRICS_PORT": str(settings.haproxy_metrics_port),
            "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(settings.fallback_proxy_port),
            # Replicas wait this long for HAProxy to stop routing to them before
            # they exit; Ray's 30 s default makes every shutdown time out.
            "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": str(settings.drain_period_s),
        }
    )
    if not shim.exists():
        # Ray's stock HAProxy passes the client's own X-Forwarded-For through
        # and adds none: per-IP limits would either key everyone as HAProxy or
        # believe what each client claims. Refuse rather than guess.
        raise RuntimeError(
            f"CAIRN_SERVE_PROXY=haproxy needs the cairn-haproxy launcher next to "
            f"{sys.executable} (reinstall Cairn), or set CAIRN_SERVE_PROXY=default"
        )
    # Adds X-Forwarded-For and keeps the metrics listener on loopback.
    env["RAY_SERVE_HAPROXY_BINARY_PATH"] = str(shim)
    return env


def is_shim(binary: str | None) -> bool:
    """Whether Serve launches HAProxy through ``cairn-haproxy``."""
    return bool(binary) and Path(str(binary)).name == "cairn-haproxy"


def stop_stray_haproxy(settings: Settings, timeout: float = 5.0) -> int:
    """Terminate HAProxy processes still running on our config after Ray stopped.

    Ray's HAProxy manager stops its HAProxy on a graceful shutdown; if that
    shutdown timed out the process would keep the public port bound.
    """
    import psutil

    marker = str(haproxy_dir(settings.state_path))
    strays = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if proc.info.get("name") == "haproxy" and any(marker in part for part in cmdline):
            strays.append(proc)
    for proc in strays:
        proc.terminate()
    _, alive = psutil.wait_procs(strays, timeout=timeout)
    for proc in alive:
        proc.kill()
    return len(strays)


def worker_env(settings: Settings, prepared: Prepared) -> dict[str, str]:
    """CAIRN_* for the replicas, with the resolved database URL and secret."""
    env = {k: v for k, v in os.environ.items() if k.startswith("CAIRN_")}
    env.update(
        {
            "CAIRN_DATABASE_URL": prepared.database_url,
            "CAIRN_SECRET_KEY": prepared.secret_key,
            "CAIRN_STATE_DIR": str(settings.state_path),
            # Effective values, command-line overrides included (claim URLs).
            "CAIRN_HOST": settings.host,
            "CAIRN_PORT": str(settings.port),
        }
    )
    return env


# Ray's file-based service discovery for Prometheus (a list of every node's
# metrics endpoint), as the Ray dashboard writes it, under this name.
SERVICE_DISCOVERY_FILE = "prom_metrics_service_discovery.json"


def service_discovery_file(state: Path) -> Path:
    """Where Prometheus finds this service's metrics endpoints (a local Ray):
    ``<state>/prometheus/``, a 0700 folder of its own (issue 45, M5)."""
    return state / "prometheus" / SERVICE_DISCOVERY_FILE


def start_service_discovery(state: Path) -> Callable[[], None]:
    """Write the Prometheus service-discovery file for the local Ray this
    process started, every 5 s, from a daemon thread: Ray's dashboard writes
    it, and ``cairn run`` starts Ray without the dashboard
    (configs/prometheus/prometheus.yml reads it; docs/operations.md). Ray's
    content, Cairn's writer: Ray's own opens a fixed name in Ray's temp
    folder (0777) for writing and follows a link planted there; this one
    writes a new file in a 0700 folder and renames it into place
    (serve_app/launch/local_ray.py, ``write_private``). Returns what stops it
    (before Ray shuts down)."""
    import ray
    from ray._private.metrics_agent import PrometheusServiceDiscoveryWriter

    from serve_app.launch.local_ray import write_private

    stop = threading.Event()
    target = service_discovery_file(state)

    class Writer(PrometheusServiceDiscoveryWriter):  # type: ignore[misc]
        def write(self) -> None:
            write_private(target, self.get_file_discovery_content())

        def run(self) -> None:
            while not stop.is_set():
                try:
                    self.write()
                except Exception as exc:
                    log.warning("writing %s failed: %s", target, exc)
                stop.wait(self.default_service_discovery_flush_period)

    node: Any = ray._private.worker._global_node
    writer = Writer(node.gcs_address, node.get_temp_dir_path(), node.get_session_dir_path())
    writer.daemon = True
    writer.start()

    def stopped() -> None:
        stop.set()
        writer.join(timeout=10)

    return stopped
