"""``cairn rescreen``: apply the current content-screening ruleset to every
item screened by an older one (docs/decisions/safety.md, "Rescreen"), on Ray.

- **Lock**: the driver holds a Postgres advisory lock for the whole run; a
  second run is refused at once.
- **Select**: per kind (patterns, questions, answers) the driver pages by id
  (keyset) through the rows whose ``safety.ruleset_version`` is not the
  current one (or that were never screened).
- **Screen**: batches of ids go to a pool of Ray actors (``RescreenWorker``);
  each screens and writes its batch in one transaction of its own
  (``services.rescreen.rescreen_batch``) and returns its outcomes. At most
  ``2 x concurrency`` batches are in flight; the progress line counts items,
  items/s and the ETA.
- **Resume**: each rescreened row stores the current version, so a rerun
  selects only what is still stale; a killed run loses only its batches in
  flight.

``Job`` is a plain class (the tests drive it in process over real Postgres
with ``local_submit``); ``run_on_ray`` puts the batches on a Ray cluster.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings.reembed import check_pool_fits, join_or_start
from serve_app.kit.screening import RULESET_VERSION
from serve_app.services import rescreen
from storage.repositories import rescreen as repo

log = logging.getLogger("cairn.rescreen")

Submit = Callable[[str, list[uuid.UUID]], Awaitable[dict[str, int]]]


class AlreadyRunning(RuntimeError):
    """Another rescreen holds the lock."""


@dataclass(frozen=True)
class RescreenOptions:
    database_url: str
    kinds: tuple[str, ...] = rescreen.KINDS
    # Items per batch: one locked read, the screens, one transaction.
    batch_size: int = 200
    # Actors in the pool, and the CPUs each asks Ray for: a fraction by
    # default, as for `cairn reembed`, so that the pool fits on the service's
    # cluster beside the deployments (which hold its whole CPUs); asking for
    # 1 CPU there left the actors pending for ever.
    concurrency: int = 2
    num_cpus: float = 0.1
    # Seconds to wait for the actors to start (placed, imported).
    ready_timeout_s: float = 120.0
    # Stop after about this many items (resume later); None: all.
    limit: int | None = None

    def __post_init__(self) -> None:
        unknown = [k for k in self.kinds if k not in rescreen.KINDS]
        if unknown or not self.kinds:
            raise ValueError(f"kinds must be among {', '.join(rescreen.KINDS)}")
        if self.batch_size < 1 or self.concurrency < 1 or self.num_cpus <= 0:
            raise ValueError("batch size, concurrency and CPUs must be positive")


@dataclass
class Summary:
    ruleset_version: str
    outcomes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    complete: bool = True

    @property
    def items(self) -> int:
        return sum(self.outcomes.values())

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "ruleset_version": self.ruleset_version,
            "items": self.items,
            "outcomes": dict(self.outcomes),
            "seconds": round(self.seconds, 3),
            "items_per_s": round(self.items_per_s, 1),
            "complete": self.complete,
        }


class Progress:
    """One progress line on stderr, at most every ``interval_s``."""

    def __init__(self, out: TextIO | None = None, interval_s: float = 2.0) -> None:
        self.out = out if out is not None else sys.stderr
        self.interval_s = interval_s
        self._last = 0.0
        self.label, self.total, self.done, self.t0 = "", 0, 0, time.monotonic()

    def start(self, label: str, total: int) -> None:
        self.label, self.total, self.done, self.t0 = label, total, 0, time.monotonic()
        self.show(force=True)

    def add(self, items: int) -> None:
        self.done += items
        self.show()

    def show(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        elapsed = max(now - self.t0, 1e-9)
        rate = self.done / elapsed
        left = max(self.total - self.done, 0)
        eta = f"{left / rate:.0f}s" if rate > 0 and left else ("0s" if not left else "?")
        pct = 100.0 * self.done / self.total if self.total else 100.0
        self.say(
            f"{self.label}: {self.done:,}/{self.total:,} items ({pct:.0f}%), "
            f"{rate:,.1f} items/s, ETA {eta}"
        )

    def say(self, message: str) -> None:
        self.out.write(f"cairn rescreen: {message}\n")
        self.out.flush()


class Job:
    """The driver: lock, select stale ids by keyset, keep batches in flight."""

    def __init__(
        self,
        options: RescreenOptions,
        sessions: async_sessionmaker[AsyncSession],
        submit: Submit,
        progress: Progress | None = None,
        version: str = RULESET_VERSION,
    ) -> None:
        self.options, self.sessions, self.submit = options, sessions, submit
        self.progress = progress or Progress()
        self.version = version

    async def run(self) -> Summary:
        summary = Summary(self.version)
        t0 = time.perf_counter()
        # The lock lives on this session's connection for the whole run.
        async with self.sessions() as holder:
            if not await repo.try_lock(holder):
                raise AlreadyRunning("another cairn rescreen is running")
            await holder.commit()
            try:
                for kind in self.options.kinds:
                    if not await self._kind(kind, summary):
                        summary.complete = False
                        break
            finally:
                await repo.unlock(holder)
                await holder.commit()
        summary.seconds = time.perf_counter() - t0
        return summary

    async def _kind(self, kind: str, summary: Summary) -> bool:
        """Rescreen every stale row of ``kind``; False when the limit stopped it."""
        async with self.sessions() as session:
            total = await repo.count_stale(session, kind, self.version)
        self.progress.start(kind, total)
        in_flight: set[asyncio.Task[dict[str, int]]] = set()
        after: uuid.UUID | None = None
        limit = self.options.limit

        async def settle(at_most: int) -> None:
            while len(in_flight) > at_most:
                done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    in_flight.discard(task)
                    counts = task.result()
                    summary.outcomes.update(counts)
                    self.progress.add(sum(counts.values()))

        try:
            while True:
                if (
                    limit is not None
                    and summary.items + self.options.batch_size * len(in_flight) >= limit
                ):
                    await settle(0)
                    return False
                async with self.sessions() as session:
                    ids = await repo.stale_ids(
                        session, kind, self.version, after, self.options.batch_size
                    )
                if not ids:
                    break
                after = ids[-1]
                in_flight.add(asyncio.ensure_future(self.submit(kind, ids)))
                await settle(2 * self.options.concurrency - 1)
            await settle(0)
        finally:
            for task in in_flight:
                task.cancel()
        self.progress.show(force=True)
        return True


def local_submit(sessions: async_sessionmaker[AsyncSession]) -> Submit:
    """Batches rescreened in this process (tests; a cluster-less run)."""

    async def submit(kind: str, ids: list[uuid.UUID]) -> dict[str, int]:
        async with sessions() as session:
            counts = await rescreen.rescreen_batch(session, kind, ids)
            await session.commit()
        return dict(counts)

    return submit


class RescreenWorker:
    """A Ray actor: its own engine; one transaction per batch."""

    def __init__(self, database_url: str) -> None:
        from storage.db import make_engine, make_sessionmaker

        self.engine = make_engine(database_url, pool_size=1, max_overflow=0)
        self.submit = local_submit(make_sessionmaker(self.engine))

    async def run(self, kind: str, ids: Sequence[uuid.UUID]) -> dict[str, int]:
        return await self.submit(kind, list(ids))

    def ready(self) -> bool:
        return True


def run_on_ray(
    options: RescreenOptions,
    *,
    address: str | None,
    temp_dir: Path | None = None,
    progress: Progress | None = None,
) -> Summary:
    """Join the cluster at ``address`` (else start a local Ray in
    ``temp_dir``), run the job on an actor pool, disconnect."""
    import ray

    progress = progress or Progress()
    join_or_start(address, temp_dir, progress.say)
    try:
        check_pool_fits(options.num_cpus, options.concurrency, progress.say)
        actor: Any = ray.remote(num_cpus=options.num_cpus)(RescreenWorker)
        pool: list[Any] = [actor.remote(options.database_url) for _ in range(options.concurrency)]
        try:
            ray.get([worker.ready.remote() for worker in pool], timeout=options.ready_timeout_s)
        except ray.exceptions.GetTimeoutError:
            for worker in pool:
                ray.kill(worker)
            raise TimeoutError(
                f"the rescreen actors were not ready after {options.ready_timeout_s:.0f}s "
                "(not enough free CPUs? lower --num-cpus or --concurrency)"
            ) from None
        turn = iter(range(sys.maxsize))

        async def submit(kind: str, ids: list[uuid.UUID]) -> dict[str, int]:
            worker = pool[next(turn) % len(pool)]
            counts: dict[str, int] = await worker.run.remote(kind, ids)
            return counts

        async def job() -> Summary:
            from storage.db import make_engine, make_sessionmaker

            engine = make_engine(options.database_url, pool_size=2, max_overflow=1)
            try:
                return await Job(options, make_sessionmaker(engine), submit, progress).run()
            finally:
                await engine.dispose()

        try:
            return asyncio.run(job())
        finally:
            for worker in pool:
                ray.kill(worker)
    finally:
        ray.shutdown()


def main(
    options: RescreenOptions,
    *,
    address: str | None,
    local_temp_dir: Path | None,
    as_json: bool = False,
) -> int:
    """The command: join ``address``, else the local service's cluster, else a
    Ray of its own; exit status (1: failed or another run holds the lock)."""
    import json

    from embeddings.reembed import job_cluster

    progress = Progress()
    address = job_cluster(address, local_temp_dir, progress.say)
    try:
        summary = run_on_ray(options, address=address, temp_dir=local_temp_dir, progress=progress)
    except KeyboardInterrupt:
        progress.say("interrupted; what was stored stays: rerun to resume")
        return 130
    except AlreadyRunning as exc:
        progress.say(f"refused: {exc}")
        return 1
    except (RuntimeError, TimeoutError) as exc:
        progress.say(f"failed: {exc}; what was stored stays: rerun to resume")
        return 1
    if as_json:
        print(json.dumps(summary.as_dict()), flush=True)
    else:
        counts = ", ".join(f"{summary.outcomes[o]:,} {o}" for o in rescreen.OUTCOMES)
        print(
            f"cairn rescreen: {summary.items:,} items rescreened with ruleset "
            f"{summary.ruleset_version} ({counts}); {summary.items_per_s:,.1f} items/s; "
            f"{'complete' if summary.complete else 'incomplete (limit): rerun to resume'}",
            flush=True,
        )
    return 0
