"""One global limit for plain uvicorn workers, as a user would build it: the
``limits`` library's fixed windows in Redis (a hit, then the window's stats, as
slowapi does), and the throwaway redis-server http_bench runs it against."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from actors.ratelimit import Decision, Rule
from benchmarks.harness import ensure_apt


class RedisRateLimiter:
    """``RateLimiter`` over Redis: one count per (rule, subject) for every worker."""

    def __init__(self, uri: str) -> None:
        from limits import RateLimitItemPerSecond
        from limits.aio.storage import RedisStorage
        from limits.aio.strategies import FixedWindowRateLimiter

        self._item = RateLimitItemPerSecond
        self._storage = RedisStorage(uri, implementation="redispy")
        self._limiter = FixedWindowRateLimiter(self._storage)
        self._items: dict[Rule, object] = {}

    async def hit(self, rule: Rule, subject: str) -> Decision:
        item = self._items.get(rule)
        if item is None:
            item = self._items[rule] = self._item(rule.limit, rule.window_s)
        allowed = await self._limiter.hit(item, rule.name, subject)  # type: ignore[arg-type]
        stats = await self._limiter.get_window_stats(item, rule.name, subject)  # type: ignore[arg-type]
        return Decision(allowed, rule.limit, max(0, stats.remaining), float(stats.reset_time))

    def cache_entries(self) -> int:
        return 0

    async def available(self) -> bool:
        try:
            return bool(await self._storage.check())
        except Exception:
            return False


@contextlib.contextmanager
def redis_server(port: int, folder: Path) -> Iterator[tuple[str, int]]:
    """A throwaway redis-server (no persistence) on 127.0.0.1:port: its URI and pid."""
    exe = ensure_apt("redis-server", "redis-server")
    folder.mkdir(parents=True, exist_ok=True)
    log = (folder / "redis.log").open("wb")
    cmd = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    cmd += ["--dir", str(folder)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        import redis

        client = redis.Redis(port=port)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start: {folder}/redis.log") from None
                time.sleep(0.1)
        yield f"async+redis://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
