"""A real local HTTP server that plays X's oEmbed endpoint (and a captcha
siteverify endpoint) for claim and appeal tests, recording every request."""

from __future__ import annotations

import html
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

SNOWFLAKE_EPOCH_MS = 1_288_834_974_657  # X's: ids carry ms since this in their top bits
_STATUS = re.compile(r"^https://twitter\.com/([A-Za-z0-9_]+)/status/([0-9]+)$")


@dataclass
class FakeX:
    """Posts by id, plus switches that make the endpoint misbehave."""

    posts: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (handle, text)
    requests: list[str] = field(default_factory=list)  # raw paths asked for
    captcha_tokens: set[str] = field(default_factory=set)
    captcha_forms: list[dict[str, list[str]]] = field(default_factory=list)
    mode: str = "normal"  # normal | slow | huge | redirect | broken | error
    _sequence: int = 0

    def post(self, handle: str, text: str, *, at: float | None = None) -> str:
        """Publish a post (now, or at the Unix time ``at``); returns its URL on
        x.com. Ids are snowflakes, as X's are: the time is in the top bits."""
        when_ms = int((time.time() if at is None else at) * 1000)
        self._sequence = (self._sequence + 1) % 4096
        post_id = ((when_ms - SNOWFLAKE_EPOCH_MS) << 22) | (1 << 12) | self._sequence
        self.posts[str(post_id)] = (handle, text)
        return f"https://x.com/{handle}/status/{post_id}"

    def embed(self, url: str) -> dict[str, object] | None:
        match = _STATUS.match(url)
        if match is None or match.group(2) not in self.posts:
            return None
        handle, text = self.posts[match.group(2)]
        body = html.escape(text).replace("\n", "<br>")
        return {
            "url": url,
            "author_name": handle.title(),
            "author_url": f"https://twitter.com/{handle}",
            "html": (
                f'<blockquote class="twitter-tweet"><p lang="en" dir="ltr">{body}</p>'
                f"&mdash; {handle.title()} (@{handle}) "
                f'<a href="{url}?ref_src=twsrc%5Etfw">November 21, 2026</a></blockquote>\n'
            ),
            "type": "rich",
            "provider_name": "Twitter",
            "version": "1.0",
        }


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *_: object) -> None:
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        fake = self.server.fake
        fake.requests.append(self.path)
        parts = urlsplit(self.path)
        if parts.path != "/oembed":
            self._send(404, b"{}")
            return
        if fake.mode == "slow":
            time.sleep(3)
        if fake.mode == "redirect":
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_address[1]}/stolen")
            self.end_headers()
            return
        if fake.mode == "error":
            self._send(500, b"oops")
            return
        if fake.mode == "broken":
            self._send(200, b"<html>not json</html>", "text/html")
            return
        if fake.mode == "huge":
            self._send(200, b'{"html": "' + b"x" * 600_000 + b'"}')
            return
        url = parse_qs(parts.query).get("url", [""])[0]
        embed = fake.embed(url)
        if embed is None:
            self._send(404, b'{"error": "not found"}')
            return
        self._send(200, json.dumps(embed).encode())

    def do_POST(self) -> None:
        fake = self.server.fake
        fake.requests.append(self.path)
        length = int(self.headers.get("Content-Length", "0"))
        form = parse_qs(self.rfile.read(length).decode())
        fake.captcha_forms.append(form)
        token = form.get("response", [""])[0]
        self._send(200, json.dumps({"success": token in fake.captcha_tokens}).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeX


@contextmanager
def running_x() -> Iterator[tuple[FakeX, str]]:
    """Start the fake; yields it and its base URL (http://127.0.0.1:<port>)."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.fake = FakeX()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
