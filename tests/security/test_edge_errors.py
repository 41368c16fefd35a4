"""Issue 30, finding 2: every answer that leaves Cairn has the JSON error shape
with the right status, the edge's included.

HAProxy (Serve's ingress, launched through cairn-haproxy) answered an over-long
request line with its own HTML 400 and a replica that died mid-request with
Serve's plain-text 500; Serve's own HTTP servers (the proxy actor, each
replica's direct ingress server) answer timeouts, backpressure and failures in
plain text. Here: the real HAProxy binary, started through the real
``cairn-haproxy`` on the config Serve's own template renders, in front of a
local server playing a replica; and Serve's own HTTP server and proxy code
with the middlewares ``ray_env`` names. The full path through ``cairn run`` is
tests/e2e/test_edge_errors_serve.py."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from ray.exceptions import RayActorError
from ray.serve._private import http_util
from ray.serve._private.haproxy import BackendConfig, HAProxyApi, HAProxyConfig, ServerConfig
from ray.serve._private.http_util import get_http_response_status, send_http_response_on_exception
from ray.serve._private.proxy import HTTPProxy
from ray.serve._private.proxy_router import ProxyRouter
from ray.serve.config import HTTPOptions

from serve_app.launch import bootstrap
from serve_app.settings import Settings
from tests.mailbox import free_port

SERVE_DEFAULT_BUFSIZE = 16384
REPO = Path(__file__).resolve().parents[2]


def assert_json_error(status: int, headers: dict[str, str], body: bytes, expected: int) -> None:
    assert status == expected, (status, body[:300])
    assert headers.get("content-type", "").startswith("application/json"), (headers, body[:300])
    shape = json.loads(body)
    assert set(shape) == {"error", "message"}, shape
    assert isinstance(shape["error"], str) and shape["error"], shape
    assert isinstance(shape["message"], str) and shape["message"], shape


def raw_request(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as bytes (httpx would refuse some) and read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


class Replica(http.server.BaseHTTPRequestHandler):
    """Plays an Api replica: healthy, answers JSON, and dies on /die."""

    def do_GET(self) -> None:
        if self.path == "/die":
            self.close_connection = True  # no answer: the process went away
            return
        body = b"success" if self.path == "/-/healthz" else b'{"ok":true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


def ray_env(state: Path) -> dict[str, str]:
    """What ``cairn run`` puts in the environment before Ray starts (the short
    links it may make for the state folder's sockets removed again)."""
    env = bootstrap.ray_env(Settings(state_dir=state))
    for link in (bootstrap.haproxy_dir(state), bootstrap.ray_dir(state)):
        if link.is_symlink():
            link.unlink()
    return env


@dataclass
class Edge:
    port: int
    config: str


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    """HAProxy as ``cairn run`` starts it: Serve's template rendered with the
    environment ray_env gives Ray, launched through cairn-haproxy."""
    replica = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Replica)
    threading.Thread(target=replica.serve_forever, daemon=True).start()
    env = ray_env(tmp_path_factory.mktemp("edge"))
    # HAProxy refuses long socket paths: a short folder of our own.
    folder = Path(tempfile.mkdtemp(prefix="cairn-edge-", dir="/tmp"))
    port = free_port()
    cfg = HAProxyConfig(
        socket_path=str(folder / "admin.sock"),
        enable_hap_optimization=False,
        metrics_enabled=False,
        nbthread=1,
        stats_port=free_port(),
        metrics_port=free_port(),
        http_options=HTTPOptions(host="127.0.0.1", port=port),
        bufsize=int(env.get("RAY_SERVE_HAPROXY_TUNE_BUFSIZE", SERVE_DEFAULT_BUFSIZE)),
        has_received_routes=True,
        has_received_servers=True,
    )
    backends = {
        "cairn": BackendConfig(
            name="cairn",
            path_prefix="/",
            app_name="cairn",
            servers=[ServerConfig("r1", "127.0.0.1", replica.server_address[1])],
        ),
        # An app whose only replica is gone: nothing listens on its port.
        "gone": BackendConfig(
            name="gone",
            path_prefix="/gone",
            app_name="gone",
            servers=[ServerConfig("r2", "127.0.0.1", free_port())],
        ),
    }
    config = folder / "haproxy.cfg"
    HAProxyApi(cfg, backends, config_file_path=str(config))._generate_config_file_internal()
    shim = Path(sys.executable).with_name("cairn-haproxy")
    process = subprocess.Popen(
        [str(shim), "-db", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        # This checkout's serve_app, wherever the virtualenv's install points.
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/-/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "HAProxy did not become healthy"
            time.sleep(0.2)
        yield Edge(port, config.read_text())
    finally:
        process.terminate()
        process.wait(timeout=10)
        replica.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


def test_an_over_long_request_line_is_a_json_4xx(edge: Edge) -> None:
    url = "/api/patterns?search=" + "a" * 70_000
    status, headers, body = raw_request(
        edge.port, f"GET {url} HTTP/1.1\r\nHost: cairn\r\nConnection: close\r\n\r\n".encode()
    )
    assert_json_error(status, headers, body, 414)
    assert json.loads(body)["error"] == "uri_too_long"


def test_a_replica_dying_mid_request_is_a_json_502(edge: Edge) -> None:
    response = httpx.get(f"http://127.0.0.1:{edge.port}/die", timeout=30)
    assert_json_error(response.status_code, dict(response.headers), response.content, 502)
    assert response.json()["error"] == "bad_gateway"


def test_an_app_with_no_replica_left_is_a_json_503(edge: Edge) -> None:
    response = httpx.get(f"http://127.0.0.1:{edge.port}/gone/x", timeout=30)
    assert_json_error(response.status_code, dict(response.headers), response.content, 503)


def test_requests_that_fit_still_reach_the_replica(edge: Edge) -> None:
    response = httpx.get(f"http://127.0.0.1:{edge.port}/api/x?q=" + "a" * 4000, timeout=10)
    assert response.status_code == 200 and response.json() == {"ok": True}


@pytest.mark.xfail(
    strict=True,
    reason="HAProxy 2.8's HTTP/1 parser answers what it cannot parse, or a request head "
    "larger than tune.bufsize, with a built-in HTML 400 that no errorfile or http-error "
    "replaces (docs/decisions/uploads-and-exposure.md, issue 30). Passing means HAProxy "
    "changed: update the docs.",
)
@pytest.mark.parametrize(
    "request_bytes",
    [b"NOT HTTP AT ALL\r\n\r\n", b"GET /" + b"a" * 200_000 + b" HTTP/1.1\r\nHost: c\r\n\r\n"],
    ids=["unparseable", "head-larger-than-the-buffer"],
)
def test_what_haproxy_cannot_parse(edge: Edge, request_bytes: bytes) -> None:
    status, headers, body = raw_request(edge.port, request_bytes)
    assert_json_error(status, headers, body, 400)


# Serve's own HTTP servers: the proxy actor and each replica's direct ingress.


@pytest.fixture
async def serve_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """Serve's own HTTP server, set up as Serve sets up its proxy's and each
    replica's (configure_http_middlewares, start_asgi_http_server) in a process
    whose environment ``ray_env`` made, around an ASGI app the test sets."""
    # Serve reads the variable once, on import; here, as if at that import.
    path = ray_env(tmp_path).get("RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH")
    monkeypatch.setattr(http_util, "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH", path)
    holder: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await holder["app"](scope, receive, send)

    port = free_port()
    options = http_util.configure_http_middlewares(HTTPOptions(host="127.0.0.1", port=port))
    task, server = await http_util.start_asgi_http_server(
        app, options, event_loop=asyncio.get_running_loop()
    )
    holder["url"] = f"http://127.0.0.1:{port}"
    try:
        yield holder
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def test_serve_proxy_answers_are_json(serve_server: dict[str, Any]) -> None:
    """Serve's proxy with no routes yet: health and routes 503, any path 404."""
    serve_server["app"] = HTTPProxy(
        node_id="n",
        node_ip_address="127.0.0.1",
        is_head=False,
        proxy_router=ProxyRouter(lambda *_: None),
        self_actor_name="proxy",
        request_timeout_s=None,
    )
    async with httpx.AsyncClient(base_url=serve_server["url"]) as http:
        for path, status in (("/-/healthz", 503), ("/-/routes", 503), ("/api/x", 404)):
            response = await http.get(path)
            assert_json_error(
                response.status_code, dict(response.headers), response.content, status
            )
        assert (await http.get("/api/x")).json()["error"] == "not_found"


async def test_a_dying_replica_and_a_timeout_through_serve_are_json(
    serve_server: dict[str, Any],
) -> None:
    """What Serve's proxy sends when the replica died (nothing: uvicorn then
    answered a plain-text 500) and when the request timed out (a plain-text
    408), from Serve's own functions."""
    failures = {
        "/died": get_http_response_status(RayActorError(), None, "req-1"),
        "/slow": get_http_response_status(TimeoutError(), 5.0, "req-2"),
    }

    async def proxy(scope: Any, receive: Any, send: Any) -> None:
        for message in send_http_response_on_exception(failures[scope["path"]], False):
            await send(message)

    serve_server["app"] = proxy
    async with httpx.AsyncClient(base_url=serve_server["url"]) as http:
        died = await http.get("/died")
        assert_json_error(died.status_code, dict(died.headers), died.content, 500)
        slow = await http.get("/slow")
        assert_json_error(slow.status_code, dict(slow.headers), slow.content, 408)
        assert "timed out" in slow.json()["message"]


async def test_the_apps_own_answers_pass_untouched(serve_server: dict[str, Any]) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        kind, body = {
            "/json": (b"application/json", b'{"error":"not_found","message":"No such."}'),
            "/page": (b"text/html; charset=utf-8", b"<h1>Not found</h1>"),
        }[scope["path"]]
        headers = [(b"content-type", kind), (b"x-kept", b"1")]
        await send({"type": "http.response.start", "status": 404, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    serve_server["app"] = app
    async with httpx.AsyncClient(base_url=serve_server["url"]) as http:
        json_answer, page = await http.get("/json"), await http.get("/page")
    assert json_answer.json() == {"error": "not_found", "message": "No such."}
    assert page.text == "<h1>Not found</h1>" and page.headers["x-kept"] == "1"
