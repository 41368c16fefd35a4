"""Does an authenticated read keep answering while the service is abused?
The probe runs idle, under abuse and after; the attacks run in a second
process: held-open stream attempts and a health flood, or with ``--surfaces``
revision diffs (docs/security.md, H1), slow client-document fetches and
registrations at their bounds (M2, M3). docs/benchmarks.md says what each sends.

    .venv/bin/python -m benchmarks.abuse_bench [--attempts 200] [--no-docs]
    .venv/bin/python -m benchmarks.abuse_bench --surfaces [--seconds 45]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import multiprocessing as mp
import os
import queue
import random
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

import httpx

from benchmarks import harness
from benchmarks.harness import PROBE_CONCURRENCY
from serve_app.launch.bootstrap import service_discovery_file

STATE_DIR = harness.ROOT / ".cairn" / "bench-abuse"
MARKS = ("<!-- abuse-bench:start -->", "<!-- abuse-bench:end -->")
SURFACES_MARKS = ("<!-- abuse-bench-surfaces:start -->", "<!-- abuse-bench-surfaces:end -->")
PORT = 8108
PROBE_TIMEOUT_S = 10.0
ABUSE_MIN_S = 60.0  # the abuse lasts at least this (the health limit counts a minute)
ATTEMPTS = 1000  # keyless MCP streams, and one key's notification streams
WAVE = 200
HEALTH_LOOPS_FIXED = 8
HEALTH_LOOPS_RANDOM = 8
ANSWER_TIMEOUT_S = 10.0  # an attack request unanswered this long is hung
ABUSE_MAX_S = 240.0  # the attackers stop by themselves after this
REOPEN_WAIT_S = 60.0
DIFF_LINES = 6000  # the review's input: 6,000 lines (about 69,000 characters)
DIFF_REVISIONS = 4
DIFF_LOOPS = 8
DIFF_TIMEOUT_S = 60.0
SURFACES_MIN_S = 60.0
SURFACE_REQUESTS = 2000  # at most, per kind of attack loop
M2_LOOPS = 40  # about 40 such requests emptied both pools before the fix
M3_LOOPS = 2
DOCUMENT_HOLD_S = 4.5  # the document server's delay, under CAIRN_OUTBOUND_TIMEOUT_S (5 s)
REGISTER_URI_PAD = 460  # redirect URIs this long fill a registration to ~4,080 of its 4,096 bytes
REDIRECT_URI = "http://127.0.0.1:53682/callback"
CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"  # RFC 7636's example
SETTINGS = {"CAIRN_SEARCH_SEMANTIC": "false", "CAIRN_TRUSTED_PROXIES": "127.0.0.1/32"}
BENCH_ENV = harness.bench_env(STATE_DIR, 7, "registration", "general", **SETTINGS)


def spoofed(rng: random.Random) -> dict[str, str]:
    """A random client address in 198.18.0.0/15 (RFC 2544's benchmarking range)."""
    n = rng.getrandbits(17)
    return {"X-Forwarded-For": f"198.{18 + (n >> 16)}.{(n >> 8) & 255}.{n & 255}"}


PROBE_ROUTE = "/api/agents/me"
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
METRICS_SETTLE_S = 12.0  # Ray's agent exports a process's records every few seconds


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine since boot (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _service_metrics() -> dict[str, float]:
    """The probe route's requests and seconds in the app, and the pool's
    waiters, from the service's own metrics on every node."""
    found = {"count": 0.0, "sum": 0.0, "pool_waiters": 0.0}
    try:
        groups = json.loads(service_discovery_file(STATE_DIR).read_text())
    except (OSError, ValueError):
        return found
    for target in [t for g in groups for t in g.get("targets", [])]:
        try:
            text = httpx.get(f"http://{target}/metrics", timeout=5).text
        except httpx.HTTPError:
            continue
        for line in text.splitlines():
            name, _, rest = line.partition("{")
            if name == "ray_cairn_db_pool_waiters":
                found["pool_waiters"] += float(line.rsplit(" ", 1)[1])
            elif name in ("ray_cairn_request_seconds_count", "ray_cairn_request_seconds_sum"):
                labels = dict(LABEL.findall(rest.rpartition("}")[0]))
                if labels.get("door") == "rest" and labels.get("route") == PROBE_ROUTE:
                    found[name.rsplit("_", 1)[1]] += float(line.rsplit(" ", 1)[1])
    return found


async def measured_probe(
    http: httpx.AsyncClient, key: str, until: MpEvent | None = None, min_s: float = 0.0
) -> dict[str, Any]:
    """``harness.probe`` with the machine's CPU busy share, the mean time of
    a probe request inside the app, and the most pool waiters seen."""
    (busy0, total0), app0, waiters = _cpu_ticks(), _service_metrics(), []

    async def watch() -> None:
        while True:
            await asyncio.sleep(5.0)
            waiters.append((await asyncio.to_thread(_service_metrics))["pool_waiters"])

    watcher = asyncio.get_running_loop().create_task(watch())
    result = await harness.probe(http, key, until=until, min_s=min_s)
    busy1, total1 = _cpu_ticks()
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    await asyncio.sleep(METRICS_SETTLE_S)  # the phase's last records reach the agent
    app = await asyncio.to_thread(_service_metrics)
    count = app["count"] - app0["count"]
    waits = {
        "cpu_busy": (busy1 - busy0) / max(1, total1 - total0),
        "app_ms": 1000 * (app["sum"] - app0["sum"]) / count if count else float("nan"),
        "app_requests": count,
        "pool_waiters_max": max(waiters, default=0.0),
    }
    return {**result, "waits": waits}


async def reopen(http: httpx.AsyncClient, key: str) -> float | None:
    """Seconds until the attacking key opens a stream again once its held ones
    are closed (its slots given back), or None within REOPEN_WAIT_S."""
    started = time.perf_counter()
    while time.perf_counter() - started < REOPEN_WAIT_S:
        with contextlib.suppress(httpx.HTTPError):
            async with http.stream(
                "GET", "/api/notifications/stream", headers=harness.bearer(key)
            ) as response:
                if response.status_code == 200:
                    return time.perf_counter() - started
        await asyncio.sleep(0.5)
    return None


@dataclass
class Tally:
    """One kind of attack request: answers by label, hung, connection errors,
    ms an answer, and (stream attempts) the connections held."""

    name: str
    answers: Counter[str] = field(default_factory=Counter)
    hung: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, int]] = field(default_factory=list)
    closed_by_server: int = 0

    def summary(self) -> dict[str, Any]:
        rate = self.answers.total() / self.seconds if self.seconds else float("nan")
        return {
            "name": self.name, "answers": dict(self.answers), "hung": self.hung,
            "errors": dict(self.errors), "p50": harness.pct(self.ms, 50),
            "p99": harness.pct(self.ms, 99), "max": max(self.ms, default=float("nan")),
            "seconds": self.seconds, "rate": rate, "held": len(self.held),
            "held_200": sum(1 for _, _, status in self.held if status == 200),
            "closed_by_server": self.closed_by_server,
        }  # fmt: skip


async def attempt(tally: Tally, port: int, path: str, headers: dict[str, str]) -> None:
    """One request on a raw connection of its own; read the answer's head (and
    a refusal's body, for its error code), then hold the connection."""
    t0 = time.perf_counter()
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(harness.HOST, port)
            lines = [f"GET {path} HTTP/1.1", f"Host: {harness.HOST}:{port}"]
            lines += [f"{k}: {v}" for k, v in headers.items()]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            status = int(head.split(" ", 2)[1])
            label = str(status)
            found = re.search(r"(?im)^content-length:\s*(\d+)", head)
            length = int(found.group(1)) if found else 0
            if status != 200 and length:
                with contextlib.suppress(ValueError, AttributeError):
                    label = f"{status} {json.loads(await reader.readexactly(length))['error']}"
    except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as exc:
        if isinstance(exc, TimeoutError):  # an OSError too
            tally.hung += 1
        else:
            tally.errors[type(exc).__name__] += 1
        if writer is not None:
            writer.close()
        return
    tally.ms.append((time.perf_counter() - t0) * 1000)
    tally.answers[label] += 1
    tally.held.append((reader, writer, status))


async def waves(tally: Tally, port: int, path: str, headers: dict[str, str], count: int) -> None:
    """``count`` attempts, WAVE at a time, each from a random address."""
    rng = random.Random(f"{tally.name} {count}")
    started = time.perf_counter()
    for first in range(0, count, WAVE):
        wave = [{**headers, **spoofed(rng)} for _ in range(min(WAVE, count - first))]
        await asyncio.gather(*(attempt(tally, port, path, h) for h in wave))
    tally.seconds = time.perf_counter() - started


async def flood(
    tally: Tally,
    http: httpx.AsyncClient,
    fixed: dict[str, str] | None,
    rng: random.Random,
    done: Any,
) -> None:
    """``GET /api/health`` as fast as answered from ``fixed`` (None: a random address each)."""
    while not done.is_set():
        t0 = time.perf_counter()
        try:
            response = await http.get("/api/health", headers=fixed or spoofed(rng))
        except httpx.TimeoutException:
            tally.hung += 1
            continue
        except httpx.HTTPError as exc:
            tally.errors[type(exc).__name__] += 1
            await asyncio.sleep(0.1)
            continue
        tally.ms.append((time.perf_counter() - t0) * 1000)
        tally.answers[str(response.status_code)] += 1


async def still_open(reader: asyncio.StreamReader) -> bool:
    """Whether a held connection whose answer was read in full is still open."""
    try:
        return bool(await asyncio.wait_for(reader.read(1), 0.05))
    except TimeoutError:
        return True
    except OSError:
        return False


async def attacks(
    port: int, key: str, count: int, started: MpEvent, answered: MpEvent, stop: MpEvent
) -> dict[str, Any]:
    """Both stream attacks at once under the health flood, until ``stop``."""
    mcp = Tally("keyless GET /mcp")
    streams = Tally("GET /api/notifications/stream, one key")
    fixed = Tally(f"GET /api/health, {HEALTH_LOOPS_FIXED} loops, one address each")
    spread = Tally(f"GET /api/health, {HEALTH_LOOPS_RANDOM} loops, a random address each request")
    done = asyncio.Event()
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    t0 = time.perf_counter()
    base = f"http://{harness.HOST}:{port}"
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=ANSWER_TIMEOUT_S) as http:
        rng = random.Random("health flood")
        loops = [flood(fixed, http, spoofed(rng), rng, done) for _ in range(HEALTH_LOOPS_FIXED)]
        loops += [flood(spread, http, None, rng, done) for _ in range(HEALTH_LOOPS_RANDOM)]
        flooding = asyncio.gather(*loops)
        started.set()
        sse = {"Accept": "text/event-stream"}
        keyed = {**sse, **harness.bearer(key)}
        await asyncio.gather(
            waves(mcp, port, "/mcp", sse, count),
            waves(streams, port, "/api/notifications/stream", keyed, count),
        )
        answered.set()
        while not stop.is_set() and time.perf_counter() - t0 < ABUSE_MAX_S:
            await asyncio.sleep(0.05)
        done.set()
        await flooding
    fixed.seconds = spread.seconds = time.perf_counter() - t0
    for tally in (mcp, streams):
        refused = [reader for reader, _, status in tally.held if status != 200]
        found = await asyncio.gather(*(still_open(r) for r in refused))
        tally.closed_by_server = sum(1 for is_open in found if not is_open)
        for _, writer, _ in tally.held:
            writer.close()
        await asyncio.gather(*(w.wait_closed() for _, w, _ in tally.held), return_exceptions=True)
    return {
        "attacks": [mcp.summary(), streams.summary()],
        "floods": [fixed.summary(), spread.summary()],
        "abuse_s": time.perf_counter() - t0,
    }


# --surfaces: diffs (H1), M2, M3
Request = Callable[[httpx.AsyncClient, random.Random], Awaitable[str]]


def labelled(response: httpx.Response) -> str:
    """A status, and a refusal's error code (either error shape has one)."""
    label = str(response.status_code)
    if response.status_code >= 400:
        with contextlib.suppress(ValueError, AttributeError, KeyError):
            label += f" {response.json()['error']}"
    return label


async def loops(
    name: str, count: int, request: Request, http: httpx.AsyncClient, stop: MpEvent, most: int
) -> dict[str, Any]:
    """``count`` loops of ``request`` until ``stop``, ``most`` requests in all
    or ABUSE_MAX_S; how many got which answer."""
    rng, tally, begun = random.Random(name), Tally(name), time.perf_counter()

    async def loop() -> None:
        while not stop.is_set() and tally.answers.total() < most:
            if time.perf_counter() - begun > ABUSE_MAX_S:
                return
            t0 = time.perf_counter()
            try:
                label = await request(http, rng)
            except httpx.HTTPError as exc:
                tally.answers[type(exc).__name__] += 1
                continue
            tally.ms.append((time.perf_counter() - t0) * 1000)
            tally.answers[label] += 1

    await asyncio.gather(*(loop() for _ in range(count)))
    tally.seconds = time.perf_counter() - begun
    return tally.summary()


async def diff(pid: str, http: httpx.AsyncClient, rng: random.Random) -> str:
    """Anonymous ``GET …/revisions/{a}/diff/{b}`` of a random pair (H1)."""
    a, b = rng.sample(range(1, DIFF_REVISIONS + 1), 2)
    response = await http.get(f"/api/patterns/{pid}/revisions/{a}/diff/{b}", headers=spoofed(rng))
    if response.status_code == 200 and any(
        f.get("too_large") for f in response.json()["data"]["fields"]
    ):
        return "200 too_large"
    return labelled(response)


def authorize_params(client_id: str, mcp_url: str, state: str = "s") -> dict[str, str]:
    return {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "state": state,
        "code_challenge": CHALLENGE,
        "code_challenge_method": "S256",
        "resource": mcp_url,
    }


async def document_server(hold_s: float) -> tuple[asyncio.Server, str]:
    """A Client ID Metadata Document server on loopback answering any path
    with a valid public client's document for that URL, each after ``hold_s``."""
    base = ""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ValueError, IndexError, asyncio.IncompleteReadError):
            path = (await reader.readuntil(b"\r\n\r\n")).split(b" ", 2)[1].decode()
            await asyncio.sleep(hold_s)
            doc = {"client_id": base + path, "client_name": "Slow Document Client",
                   "redirect_uris": [REDIRECT_URI],
                   "token_endpoint_auth_method": "none"}  # fmt: skip
            body = json.dumps(doc).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, harness.HOST, 0)
    base = f"http://{harness.HOST}:{server.sockets[0].getsockname()[1]}"
    return server, base


async def new_document(
    docs: str, mcp_url: str, serial: Iterator[int], http: httpx.AsyncClient, rng: random.Random
) -> str:
    """Anonymous ``GET /authorize`` naming a new document URL each time (M2)."""
    params = authorize_params(f"{docs}/clients/{next(serial)}.json", mcp_url)
    return labelled(await http.get("/authorize", params=params, headers=spoofed(rng)))


def registration(over: bool) -> dict[str, Any]:
    """A registration with every bounded field full, the whole just within
    the 4 KiB bound; ``over``: with a 900 kB ``jwks`` as well (M3)."""
    uri = f"http://{harness.HOST}:53682/cb/" + "u" * REGISTER_URI_PAD
    body: dict[str, Any] = {
        "client_name": "n" * 100, "redirect_uris": [f"{uri}{i}" for i in range(5)],
        "contacts": [f"{'c' * 240}{i}@example.org" for i in range(3)], "software_id": "s" * 100,
        "software_version": "v" * 100, "token_endpoint_auth_method": "none",
    }  # fmt: skip
    if over:
        body["jwks"] = {"keys": [{"kty": "oct", "k": "k" * 900_000}]}
    return body


async def register_client(body: dict[str, Any], http: httpx.AsyncClient, rng: random.Random) -> str:
    return labelled(await http.post("/register", json=body, headers=spoofed(rng)))


async def huge_state(
    client_id: str, mcp_url: str, http: httpx.AsyncClient, rng: random.Random
) -> str:
    """``/authorize`` with a huge ``state``: a GET (the URI just under the
    edge's 8 KiB) or a POSTed form of 900 kB, in turn (M3)."""
    if rng.random() < 0.5:
        params = authorize_params(client_id, mcp_url, "s" * 7_000)
        return labelled(await http.get("/authorize", params=params, headers=spoofed(rng)))
    form = authorize_params(client_id, mcp_url, "s" * 900_000)
    return labelled(await http.post("/authorize", data=form, headers=spoofed(rng)))


async def attack_loops(port: int, pid: str, most: int, started: MpEvent, stop: MpEvent) -> Any:
    """The diff loops (H1) and the M2 and M3 loops, at most ``most`` requests a kind."""
    base = f"http://{harness.HOST}:{port}"
    limits = httpx.Limits(max_connections=128, max_keepalive_connections=128)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=DIFF_TIMEOUT_S) as http:
        server, docs = await document_server(DOCUMENT_HOLD_S)
        mcp_url = f"{base}/mcp"
        client = await http.post("/register", json=registration(False))
        client.raise_for_status()
        client_id = client.json()["client_id"]
        kinds: list[tuple[str, int, Request]] = [
            ("H1 diffs", DIFF_LOOPS, partial(diff, pid)),
            ("M2 /authorize, a new document URL each", M2_LOOPS,
             partial(new_document, docs, mcp_url, itertools.count())),
            ("M3 /register at the bound", M3_LOOPS, partial(register_client, registration(False))),
            ("M3 /register with 900 kB jwks", M3_LOOPS,
             partial(register_client, registration(True))),
            ("M3 /authorize, huge state", M3_LOOPS, partial(huge_state, client_id, mcp_url)),
        ]  # fmt: skip
        started.set()
        found = await asyncio.gather(*(loops(*k, http, stop, most) for k in kinds))
        server.close()
    return found


def attackers(
    surfaces: bool, port: int, who: str, count: int, events: tuple[MpEvent, ...], results: Any
) -> None:
    """The attackers' process: ``attack_loops`` on the pattern ``who``
    (``surfaces``) or ``attacks`` with the key ``who``; puts the result."""
    started, answered, stop = events
    if surfaces:
        results.put(asyncio.run(attack_loops(port, who, count, started, stop)))
    else:
        results.put(asyncio.run(attacks(port, who, count, started, answered, stop)))


async def probed(
    http: httpx.AsyncClient,
    prober: str,
    attack: tuple[bool, int, str, int],
    min_s: float,
    after: Callable[[], Awaitable[Any]] | None = None,
) -> dict[str, Any]:
    """The probe idle; under ``attackers(*attack)`` in a second process for at
    least ``min_s`` (and, but with --surfaces, until every attack request was
    answered); once they stopped and put their result (and ``after`` ran), again."""
    idle = await measured_probe(http, prober)
    print("bench: idle", idle, flush=True)
    ctx = mp.get_context("spawn")
    started, answered, stop = ctx.Event(), ctx.Event(), ctx.Event()
    results: mp.Queue[Any] = ctx.Queue()
    events = (started, answered, stop)
    proc = ctx.Process(target=attackers, args=(*attack, events, results), daemon=True)
    proc.start()
    try:
        if not await asyncio.to_thread(started.wait, 60.0):
            raise RuntimeError("bench: the attackers did not start")
        until = None if attack[0] else answered
        abused = await measured_probe(http, prober, until=until, min_s=min_s)
        print("bench: under abuse", abused, flush=True)
    finally:
        stop.set()
    try:
        found = await asyncio.to_thread(results.get, True, 120.0)
    except queue.Empty as exc:
        raise RuntimeError("bench: the attackers gave no result") from exc
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.terminate()
    print("bench: attacks", found, flush=True)
    extra = await after() if after is not None else None
    later = await measured_probe(http, prober)
    print("bench: after", later, extra, flush=True)
    return {"idle": idle, "abused": abused, "found": found, "after": later, "extra": extra}


async def run(base: str, port: int, count: int, surfaces: bool, min_s: float) -> dict[str, Any]:
    """The probe around ``attacks`` (then how soon the attacking key streams
    again) or, with ``surfaces``, around ``attack_loops`` on a pattern with
    DIFF_REVISIONS revisions."""
    limits = httpx.Limits(max_connections=PROBE_CONCURRENCY * 2)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=PROBE_TIMEOUT_S) as http:
        prober = (await harness.register(http, "abuse bench prober"))["api_key"]
        if not surfaces:
            key = (await harness.register(http, "abuse bench streamer"))["api_key"]
            got = await probed(
                http, prober, (False, port, key, count), ABUSE_MIN_S, lambda: reopen(http, key)
            )
            return {**got.pop("found"), **got, "reopen_s": got["extra"]}
        author = (await harness.register(http, "abuse bench author"))["api_key"]
        # DIFF_LINES distinct lines, then the same lines each followed by a blank line.
        steps = [f"step {i:05d}" for i in range(DIFF_LINES)]
        before, after = "\n".join(steps) + "\n", "".join(f"{line}\n\n" for line in steps)
        body = {"title": "A long pattern", "description": "Many steps.", "content": before}
        created = await http.post("/api/patterns", json=body, headers=harness.bearer(author))
        created.raise_for_status()
        pid = created.json()["data"]["id"]
        for n in range(2, DIFF_REVISIONS + 1):
            content = after if n % 2 == 0 else before + f"step {n}\n"
            path, body = f"/api/patterns/{pid}", {"content": content}
            (await http.put(path, json=body, headers=harness.bearer(author))).raise_for_status()
        got = await probed(http, prober, (True, port, pid, count), min_s)
    return {"loops": got.pop("found"), **got, "content_chars": len(after), "requests": count}


def _ms(value: float) -> str:
    return "n/a" if value != value else f"{value:.1f}"  # NaN: nothing measured


def _counts(counts: dict[str, int], empty: str = "none") -> str:
    return ", ".join(f"{k}: {v:,}" for k, v in sorted(counts.items())) or empty


def probe_table(result: dict[str, Any], labels: tuple[str, str, str]) -> list[str]:
    """The probe's rows: idle, under abuse, after."""
    lines = [
        "| probe `GET /api/agents/me` | requests | req/s | p50 ms | p99 ms | max ms | failed "
        "| mean ms | of it in the app, ms | machine CPU busy | pool waiters, most |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for label, key in zip(labels, ("idle", "abused", "after"), strict=True):
        p = result[key]
        w = p.get("waits") or {}
        lines.append(
            f"| {label} | {p['requests']:,} | {p['rps']:.0f} | {_ms(p['p50'])} | "
            f"{_ms(p['p99'])} | {_ms(p['max'])} | {_counts(p['failed'], '0')} "
            f"| {_ms(p.get('mean', float('nan')))} | {_ms(w.get('app_ms', float('nan')))} "
            f"| {w.get('cpu_busy', float('nan')):.0%} | {w.get('pool_waiters_max', 0):.0f} |"
        )
    return lines


def section(result: dict[str, Any], load_before: float, count: int, run_s: float) -> str:
    lines = harness.section_head(MARKS[0], "abuse_bench.py", load_before)
    lines += [
        f"- Attacks: {count:,} keyless `GET /mcp` and {count:,} `GET /api/notifications/stream`.",
        "",
        *probe_table(result, ("idle", "under abuse", "after")),
        "",
        "| attack | answers (status, error) | hung | connection errors | answer p50 / max ms "
        "| all answered in (s) | held open to the end | of which refused, closed by the "
        "server meanwhile |",
        "|---|---|---:|---|---:|---:|---:|---:|",
        *(
            f"| {a['name']} | {_counts(a['answers'])} | {a['hung']} | {_counts(a['errors'], '0')} "
            f"| {_ms(a['p50'])} / {_ms(a['max'])} | {a['seconds']:.1f} | "
            f"{a['held']:,} ({a['held_200']} accepted streams) | {a['closed_by_server']:,} |"
            for a in result["attacks"]
        ),
        "",
        "| health flood | answers (status) | answers/s | p50 ms | p99 ms | hung | "
        "connection errors |",
        "|---|---|---:|---:|---:|---:|---|",
        *(
            f"| {f['name']} | {_counts(f['answers'])} | {f['rate']:.0f} | {_ms(f['p50'])} | "
            f"{_ms(f['p99'])} | {f['hung']} | {_counts(f['errors'], '0')} |"
            for f in result["floods"]
        ),
    ]
    idle, abused, reopen_s = result["idle"], result["abused"], result["reopen_s"]
    hung = sum(a["hung"] for a in result["attacks"]) + sum(f["hung"] for f in result["floods"])
    failed = sum(abused["failed"].values())
    fixed_ok = result["floods"][0]["answers"].get("200", 0)
    health_limit = os.environ.get("CAIRN_RATELIMIT_HEALTH", "120/minute")
    reopened = (
        f"the attacking key's next stream was accepted (after {reopen_s:.2f} s of trying: its "
        "slots were given back)"
        if reopen_s is not None
        else f"the attacking key could NOT open a stream within {REOPEN_WAIT_S:.0f} s"
    )
    lines += [
        "",
        f"Under abuse the probe answered {abused['requests']:,} requests with "
        f"{failed or 'no'} failures; its p50 went from {_ms(idle['p50'])} ms idle to "
        f"{_ms(abused['p50'])} ms, its p99 from {_ms(idle['p99'])} to {_ms(abused['p99'])} ms. "
        f"{hung or 'No'} attack requests hung. Each fixed health address got "
        f"{fixed_ok / HEALTH_LOOPS_FIXED:.0f} answers with status 200 on average (the limit: "
        f"{health_limit} per address), then 429s; once the attackers had closed everything, "
        f"{reopened}. The abuse lasted {result['abuse_s']:.0f} s; the whole run (start, "
        f"measure, stop) {run_s / 60:.1f} minutes.",
        MARKS[1],
    ]
    return "\n".join(lines) + "\n\n"  # a blank line after the end mark


def surfaces_section(result: dict[str, Any], load_before: float, run_s: float, min_s: float) -> str:
    lines = harness.section_head(SURFACES_MARKS[0], "abuse_bench.py --surfaces", load_before)
    lines += [
        f"- The edited pattern: {result['content_chars']:,} characters; the diff loops for at "
        f"least {min_s:.0f} s; each kind of loop stops after {result['requests']:,} requests, "
        "or when the probe ends.",
        "",
        *probe_table(result, ("idle", "while they run", "after")),
        "",
        "| attack loops | answers (status error: count) | in s | p50 ms | max ms |",
        "|---|---|---:|---:|---:|",
        *(
            f"| {g['name']} | {_counts(g['answers'])} | {g['seconds']:.0f} | {_ms(g['p50'])} | "
            f"{_ms(g['max'])} |"
            for g in result["loops"]
        ),
        "",
        f"The whole run {run_s / 60:.1f} minutes.",
        SURFACES_MARKS[1],
    ]
    return "\n".join(lines) + "\n\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.abuse_bench")
    add = parser.add_argument
    add("--attempts", type=int, default=ATTEMPTS, help=f"per stream attack ({ATTEMPTS})")
    add("--no-docs", action="store_true", help="print only; leave docs/benchmarks.md alone")
    add("--surfaces", action="store_true", help="diffs, OAuth fetches, registrations (H1, M2, M3)")
    add("--seconds", type=float, help="with --surfaces: how long at least the abuse runs")
    add("--requests", type=int, default=SURFACE_REQUESTS, help="with --surfaces: most a kind")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    harness.stop_on_sigterm()
    # Only the loopback document server the bench runs is fetched (M2).
    extra = {"CAIRN_OAUTH_CLIENT_METADATA_ALLOW_LOOPBACK": "true"} if args.surfaces else {}
    env = harness.server_env({**BENCH_ENV, **extra})
    load_before = os.getloadavg()[0]
    harness.fresh_state(STATE_DIR)
    min_s = args.seconds or SURFACES_MIN_S
    count = args.requests if args.surfaces else args.attempts
    with harness.serve_running(PORT, env, STATE_DIR) as serve:
        result = asyncio.run(run(serve.base, PORT, count, args.surfaces, min_s))
    run_s = time.monotonic() - t0
    print(f"bench: the run took {run_s:.0f} s", flush=True)
    name = "abuse-surfaces" if args.surfaces else "abuse"
    (STATE_DIR / f"{name}.json").write_text(json.dumps(result, indent=2))
    if args.surfaces:
        text, marks = surfaces_section(result, load_before, run_s, min_s), SURFACES_MARKS
    else:
        text, marks = section(result, load_before, count, run_s), MARKS
    harness.publish(text, *marks, args.no_docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
