"""Boot the real service (`cairn run`: embedded Postgres, local Ray, Serve with
HAProxy, two ingress replicas, RateLimiter actors) once per test session."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from serve_app.launch.bootstrap import haproxy_dir, ray_dir
from storage.embedded import DATABASE
from tests.api.conftest import OPERATOR, OPERATOR_TOKEN
from tests.mailbox import Mailbox, free_port, running_smtp
from tests.xserver import FakeX, running_x

GENERAL_LIMIT = 150
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Service:
    base_url: str
    state_dir: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log_path: Path
    mailbox: Mailbox
    x: FakeX  # the local server playing X's oEmbed endpoint

    def set_role(self, username: str, role: str) -> None:
        """`cairn users set-role` against the running service's database."""
        done = subprocess.run(
            [sys.executable, "-m", "serve_app.launch.cli", "users", "set-role", username, role],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    @property
    def database_url(self) -> str:
        """The embedded Postgres the service started (a unix socket in its state folder)."""
        return f"postgresql://postgres:@/{DATABASE}?host={self.state_dir / 'pgdata'}"


def wait_healthy(
    base_url: str, process: subprocess.Popen[bytes], log_path: Path, timeout: float = 240.0
) -> None:
    """Poll /api/health until it answers 200; fail early if the server exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-5000:]
            raise RuntimeError(f"server exited with {process.returncode}:\n{tail}")
        try:
            if httpx.get(f"{base_url}/api/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(
        f"not ready after {timeout}s:\n{log_path.read_text(errors='replace')[-5000:]}"
    )


async def until_healthy(http: httpx.AsyncClient, within_s: float = 60.0) -> dict[str, Any]:
    """/api/health's body once it says ``healthy``. A part may be ``degraded``
    for a while (indexes loading, a probe missing its 2 s deadline on a busy
    machine); fail with the parts' reasons if it stays so."""
    deadline = time.monotonic() + within_s
    while True:
        body: dict[str, Any] = (await http.get("/api/health")).json()
        if body["status"] == "healthy" or time.monotonic() > deadline:
            assert body["status"] == "healthy", body.get("parts")
            return body
        await asyncio.sleep(0.5)


def _leftovers(state_dir: Path) -> list[str]:
    markers = (str(state_dir), str(haproxy_dir(state_dir)), str(ray_dir(state_dir)))
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if any(marker in cmdline for marker in markers):
            found.append(f"{proc.info['pid']} {cmdline[:120]}")
    return found


def actor_process(service: Service, actor_class: str) -> psutil.Process:
    """This service's worker process of the Ray actor ``actor_class``."""
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if actor_class not in " ".join(proc.info.get("cmdline") or []):
            continue
        try:
            if proc.environ().get("CAIRN_STATE_DIR") == str(service.state_dir):
                return proc
        except psutil.Error:
            continue
    raise AssertionError(f"no {actor_class} process for this service")


@pytest.fixture(scope="session")
def smtp_server() -> Iterator[tuple[Mailbox, int]]:
    """A real SMTP server for the service's e-mail."""
    with running_smtp() as server:
        yield server


@pytest.fixture(scope="session")
def x_server() -> Iterator[tuple[FakeX, str]]:
    """A real local HTTP server playing X's oEmbed endpoint."""
    with running_x() as server:
        yield server


@pytest.fixture(scope="package")
def service(
    tmp_path_factory: pytest.TempPathFactory,
    smtp_server: tuple[Mailbox, int],
    x_server: tuple[FakeX, str],
) -> Iterator[Service]:
    state_dir = tmp_path_factory.mktemp("cairn-e2e")
    port = free_port()
    env = {
        **os.environ,
        "CAIRN_STATE_DIR": str(state_dir),
        "CAIRN_PORT": str(port),
        "CAIRN_PUBLIC_BASE_URL": "https://cairn.e2e",
        "CAIRN_HAPROXY_STATS_PORT": str(free_port()),
        "CAIRN_HAPROXY_METRICS_PORT": str(free_port()),
        "CAIRN_FALLBACK_PROXY_PORT": str(free_port()),
        # Tests play several clients behind a trusted load balancer on loopback.
        "CAIRN_TRUSTED_PROXIES": "127.0.0.0/8",
        "CAIRN_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "CAIRN_RATELIMIT_GENERAL": f"{GENERAL_LIMIT}/hour",
        "CAIRN_SMTP_URL": f"smtp://127.0.0.1:{smtp_server[1]}",
        "CAIRN_FANOUT_BATCH_SIZE": "100",
        "CAIRN_MAIL_RETRY_BASE_S": "1",
        "CAIRN_X_OEMBED_URL": f"{x_server[1]}/oembed",
        # Notification streams send a heartbeat every 2 s (15 s by default):
        # tests see several through HAProxy without waiting long.
        "CAIRN_STREAM_HEARTBEAT_S": "2",
        # Webhooks to a receiver on loopback (tests/e2e/test_webhooks_serve.py).
        "CAIRN_WEBHOOKS_ALLOW_LOOPBACK": "true",
    }
    env.pop("CAIRN_DATABASE_URL", None)
    env.pop("RAY_ADDRESS", None)
    # Every process of the service runs this checkout's code, HAProxy's
    # launcher (a console script Serve starts) included, wherever the
    # virtualenv's editable install points.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    log_path = state_dir / "cairn-run.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "serve_app.launch.cli", "run"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    svc = Service(
        f"http://127.0.0.1:{port}",
        state_dir,
        env,
        process,
        log_path,
        smtp_server[0],
        x_server[0],
    )
    try:
        wait_healthy(svc.base_url, process, log_path)
        yield svc
    finally:
        # Ctrl-C, as a person would; the service must stop cleanly and fully.
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            process.kill()
            code = -9
        deadline = time.monotonic() + 20
        left = _leftovers(state_dir)
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = _leftovers(state_dir)
        for link in (haproxy_dir(state_dir), ray_dir(state_dir)):
            if link.is_symlink():
                link.unlink()
        assert code == 0, f"cairn run exited with {code}:\n{svc.log()}"
        assert not left, f"processes left behind: {left}"


@pytest.fixture
async def http(service: Service) -> Iterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=250, max_keepalive_connections=250)
    # The operator token: /api/health shows these tests every part's state.
    async with httpx.AsyncClient(
        base_url=service.base_url, timeout=30, limits=limits, headers=OPERATOR
    ) as client:
        yield client  # type: ignore[misc]
