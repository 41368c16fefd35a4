"""``cairn reembed``: re-embed the whole corpus with a model, on Ray, then
swap the live search index to it.

- **Select**: the driver pages (keyset, by id) through the visible rows of
  each kind that have no *current* vector under the model: none stored, or
  one stored from other text (its SHA-256 differs from the row's text now).
- **Embed**: batches of ids go to a pool of Ray actors (``EmbedWorker``),
  each holding the model once. For a batch an actor reads the rows' texts and
  their hashes in one statement (so the hash stored is the hash of the text
  embedded; rows done meanwhile are skipped), encodes the distinct texts and
  upserts the vectors in one statement and one transaction. At most
  ``2 x concurrency`` batches are in flight; results stream back in completion
  order and drive the progress line (rows done / total, rows/s, ETA).
- **Resume**: what is committed stays; a rerun selects only what is still
  missing or stale, so a killed job loses at most the batches in flight.
- **Catch up**: rows written while the job ran are stale again; further
  passes embed them until none is left (or ``max_passes`` is reached).
- **Swap**: only then, when the new vectors are complete, the running
  service's VectorIndex is told to ``activate`` the model: it builds new FAISS
  indexes from the stored vectors and swaps them in at once, searches keep
  using the old ones until then. Without a running service the model is
  recorded as active in ``search_model`` and the next start loads it.

``Job`` and ``BatchEmbedder`` are plain classes (the tests drive them in
process over real Postgres); ``run_on_ray`` puts them on a Ray cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings.config import DEFAULT_MODEL, KINDS
from embeddings.encoder import PRECISIONS, Encoder, ray_device, to_bytes
from embeddings.onnx_model import default_cache
from storage.repositories import reembed as stale
from storage.repositories import search as search_repo

log = logging.getLogger("cairn.reembed")

APP_NAME = "cairn"
NAMESPACE = "cairn"
INDEX_DEPLOYMENT = "VectorIndex"
ACTIVATED = {
    "service": "the live index was swapped",
    "database": "recorded as the active model",
    None: "the active model is unchanged",
}


@dataclass(frozen=True)
class ReembedOptions:
    database_url: str
    model: str = DEFAULT_MODEL
    kinds: tuple[str, ...] = KINDS
    # Rows per batch: one read, one encode call and one upsert each.
    batch_size: int = 256
    # Actors in the pool, and what each asks Ray for. The defaults fit beside
    # a running service on a small machine (it holds ~1.6 CPUs of 2); on a
    # cluster give each actor whole CPUs (or a GPU) and more actors.
    concurrency: int = 2
    num_cpus: float = 0.1
    num_gpus: float = 0.0
    # torch threads per actor (None: the actor's whole CPUs, at least 1).
    threads: int | None = None
    # cpu, cuda, or auto (CUDA where Ray gave the actor a GPU).
    device: str = "auto"
    # Niceness of the actors' processes: the live service wins the cores.
    nice: int = 10
    # The encoder as the Embedder runs it (EmbedderConfig): same vectors;
    # or bf16 (CPU: bf16 matrix products, embeddings/bf16_model.py), whose
    # vectors rank as fp32's do against fp32 queries; or auto (``cairn
    # reembed``'s default): bf16 on a CPU with bf16 products, else fp32,
    # decided in each actor (embeddings/encoder.py, ``pick_precision``).
    backend: str = "auto"
    precision: str = "fp32"
    cache_dir: str = ""
    activate: bool = True
    # Stop after this many rows (debugging, and the resume tests).
    limit: int | None = None
    # The main pass plus catch-up passes for rows changed meanwhile.
    max_passes: int = 4
    ready_timeout_s: float = 300.0
    activate_timeout_s: float = 900.0

    def __post_init__(self) -> None:
        unknown = set(self.kinds) - set(KINDS)
        if unknown or not self.kinds:
            raise ValueError(f"kinds must be among {', '.join(KINDS)}")
        if self.batch_size < 1 or self.concurrency < 1:
            raise ValueError("batch size and concurrency must be at least 1")
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise ValueError("num_cpus and num_gpus must not be negative")
        if self.limit is not None and self.limit < 1:
            raise ValueError("limit must be at least 1")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}")

    @property
    def torch_threads(self) -> int:
        return self.threads or max(1, int(self.num_cpus))


@dataclass
class BatchResult:
    kind: str
    rows: int  # ids in the batch
    embedded: int  # vectors stored
    texts: int  # distinct texts encoded
    encode_s: float = 0.0
    db_s: float = 0.0

    @property
    def skipped(self) -> int:
        """Rows already current (or gone, or hidden) when the batch ran."""
        return self.rows - self.embedded


class BatchEmbedder:
    """Embeds one batch of rows: read texts + hashes, encode, upsert."""

    def __init__(
        self, encoder: Encoder, sessions: async_sessionmaker[AsyncSession], model: str
    ) -> None:
        self.encoder = encoder
        self.sessions = sessions
        self.model = model

    async def embed(self, kind: str, item_ids: Sequence[uuid.UUID]) -> BatchResult:
        t0 = time.perf_counter()
        async with self.sessions() as session:
            rows = await stale.stale_texts(session, kind, self.model, item_ids)
            await session.rollback()
        if not rows:
            return BatchResult(kind, len(item_ids), 0, 0, 0.0, time.perf_counter() - t0)
        # Each distinct text is encoded once (forks and templates repeat).
        distinct = sorted({h: t for _, t, h in rows}.items())
        t1 = time.perf_counter()
        vectors = await asyncio.to_thread(self.encoder.encode, [t for _, t in distinct])
        t2 = time.perf_counter()
        by_hash = {h: to_bytes(v) for (h, _), v in zip(distinct, vectors, strict=True)}
        # No transaction is held open while encoding. Should a row change in
        # that window, the vector stored is still that of the hash stored with
        # it: the row reads as stale, and the catch-up pass (or the live
        # worker, once the model is active) embeds it again.
        async with self.sessions() as session:
            await search_repo.store_embeddings(
                session, kind, self.model, [(i, h, by_hash[h]) for i, _, h in rows]
            )
            await session.commit()
        t3 = time.perf_counter()
        return BatchResult(
            kind, len(item_ids), len(rows), len(distinct), t2 - t1, (t1 - t0) + (t3 - t2)
        )


# (kind, ids) -> the batch's result, wherever it ran.
Submit = Callable[[str, list[uuid.UUID]], Awaitable[BatchResult]]
# model -> index sizes (the live VectorIndex), or None (recorded in the database).
Activate = Callable[[str], Awaitable[dict[str, int] | None]]


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds + 0.5)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Progress:
    """One progress line on stderr: redrawn in place on a terminal, else
    printed at most every ``interval_s``."""

    def __init__(self, out: TextIO | None = None, interval_s: float = 2.0) -> None:
        self.out = out if out is not None else sys.stderr
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.interval_s = 0.2 if self.tty else interval_s
        self._last = 0.0

    def start(self, label: str, total: int) -> None:
        self.label, self.total, self.done, self.embedded = label, total, 0, 0
        self.t0 = time.monotonic()
        self._last = 0.0
        self.show(force=True)

    def add(self, result: BatchResult) -> None:
        self.done += result.rows
        self.embedded += result.embedded
        self.show()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        rate = self.done / elapsed
        left = max(self.total - self.done, 0)
        eta = left / rate if rate > 0 else math.inf
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (
            f"cairn reembed: {self.label}: {self.done:,}/{self.total:,} rows ({pct:.0f}%), "
            f"{self.embedded:,} embedded, {rate:,.1f} rows/s, "
            f"elapsed {_duration(elapsed)}, ETA {_duration(eta) if left else '0s'}"
        )

    def show(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        if self.tty:
            self.out.write("\r\033[K" + self.line())
        else:
            self.out.write(self.line() + "\n")
        self.out.flush()

    def finish(self) -> None:
        self._last = 0.0
        self.show(force=True)
        if self.tty:
            self.out.write("\n")
            self.out.flush()

    def say(self, message: str) -> None:
        self.out.write(("\r\033[K" if self.tty else "") + f"cairn reembed: {message}\n")
        self.out.flush()


@dataclass
class Summary:
    model: str
    stale_at_start: int = 0  # rows lacking a current vector when the job began
    rows: int = 0  # rows sent to the pool (all passes)
    embedded: int = 0  # vectors stored
    texts: int = 0  # distinct texts encoded
    batches: int = 0
    passes: int = 0
    complete: bool = False  # every row current (no --limit stop)
    activated: str | None = None  # "service", "database", or None
    indexes: dict[str, int] | None = None  # the live index sizes after the swap
    # Wall-clock times (epoch seconds): the passes, and the swap.
    embed_started_at: float | None = None
    embed_ended_at: float | None = None
    swapped_at: float | None = None
    startup_s: float = 0.0  # starting the workers (loading the model)
    # What the workers encode on: "cpu bf16", "cuda fp32", ...
    encoders: list[str] = field(default_factory=list)
    embed_s: float = 0.0  # the passes: selection, encoding, writing
    encode_s: float = 0.0  # summed over batches (actors run in parallel)
    total_s: float = 0.0
    per_pass: list[int] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return self.rows - self.embedded

    @property
    def rows_per_s(self) -> float:
        return self.embedded / self.embed_s if self.embed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "skipped": self.skipped,
            "rows_per_s": round(self.rows_per_s, 2),
        }


class Job:
    """The passes, the bounded dispatch of batches and the final swap, over
    any ``submit`` (Ray actors in production, in process in tests)."""

    def __init__(
        self,
        options: ReembedOptions,
        sessions: async_sessionmaker[AsyncSession],
        submit: Submit,
        *,
        in_flight: int | None = None,
        activate: Activate | None = None,
        progress: Progress | None = None,
        warm_up: Callable[[], Awaitable[list[str]]] | None = None,
    ) -> None:
        self.options = options
        self._warm_up = warm_up
        self.sessions = sessions
        self.submit = submit
        self.in_flight = max(1, in_flight or 2 * options.concurrency)
        self._activate = activate
        self.progress = progress or Progress()
        self.summary = Summary(options.model)

    async def count(self) -> int:
        async with self.sessions() as session:
            return sum(
                [
                    await stale.count_stale(session, k, self.options.model)
                    for k in self.options.kinds
                ]
            )

    async def run(self) -> Summary:
        t0 = time.monotonic()
        s, o = self.summary, self.options
        total = await self.count()
        s.stale_at_start = total
        try:
            if total and self._warm_up is not None:
                # Start the workers (load the model) outside the timed passes.
                t1 = time.monotonic()
                s.encoders = await self._warm_up()
                s.startup_s = time.monotonic() - t1
            while total and s.passes < o.max_passes and not self._limited():
                s.embed_started_at = s.embed_started_at or time.time()
                s.passes += 1
                label = "embedding" if s.passes == 1 else f"catch-up pass {s.passes - 1}"
                self.progress.start(label, total)
                before = s.rows
                t1 = time.monotonic()
                try:
                    await self._pass()
                finally:
                    s.embed_s += time.monotonic() - t1
                    self.progress.finish()
                s.per_pass.append(s.rows - before)
                s.embed_ended_at = time.time()
                total = await self.count()
            s.complete = total == 0
            if self._limited() and total:
                self.progress.say(
                    f"stopped after --limit {o.limit} rows; {total:,} left: rerun to resume"
                )
            elif total:
                self.progress.say(
                    f"{total:,} rows changed again during {s.passes} passes; the live "
                    f"worker embeds them after the swap"
                )
            if o.activate and not (self._limited() and total):
                await self._swap()
        finally:
            s.total_s = time.monotonic() - t0
        return s

    def _limited(self) -> bool:
        return self.options.limit is not None and self.summary.rows >= self.options.limit

    async def _pass(self) -> None:
        o, s = self.options, self.summary
        pending: set[asyncio.Task[BatchResult]] = set()
        page = o.batch_size * self.in_flight * 2

        async def settle(at_most: int) -> None:
            while len(pending) > at_most:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    pending.discard(task)
                    self._record(task.result())

        try:
            for kind in o.kinds:
                after: uuid.UUID | None = None
                while not self._limited():
                    async with self.sessions() as session:
                        ids = await stale.stale_ids(session, kind, o.model, after, page)
                        await session.rollback()
                    if not ids:
                        break
                    after = ids[-1]
                    for start in range(0, len(ids), o.batch_size):
                        chunk = ids[start : start + o.batch_size]
                        if o.limit is not None:
                            chunk = chunk[: o.limit - s.rows]
                        if not chunk:
                            break
                        await settle(self.in_flight - 1)
                        s.rows += len(chunk)
                        pending.add(asyncio.ensure_future(self.submit(kind, chunk)))
            await settle(0)
        finally:
            # A failure (or Ctrl-C) abandons the batches in flight: what they
            # had not committed is lost, and a rerun selects those rows again.
            for task in pending:
                task.cancel()

    def _record(self, result: BatchResult) -> None:
        s = self.summary
        s.embedded += result.embedded
        s.texts += result.texts
        s.batches += 1
        s.encode_s += result.encode_s
        self.progress.add(result)

    async def _swap(self) -> None:
        s = self.summary
        if self._activate is not None:
            indexes = await self._activate(s.model)
            if indexes is not None:
                s.activated, s.indexes, s.swapped_at = "service", indexes, time.time()
                self.progress.say(
                    f"the running service now searches with {s.model!r} ("
                    + ", ".join(f"{k}: {n:,}" for k, n in sorted(indexes.items()))
                    + ")"
                )
                return
        async with self.sessions() as session:
            await search_repo.set_active_model(session, s.model)
            await session.commit()
        s.activated, s.swapped_at = "database", time.time()
        self.progress.say(
            f"no running service reached; {s.model!r} recorded as the active model "
            f"(the next start loads it)"
        )


# --- Ray ------------------------------------------------------------------


def model_folder(options: ReembedOptions) -> str:
    """What the encoder loads for ``options.model``: a stored version's local
    copy (``ModelStoreError`` where the database does not have it whole),
    else the name itself."""
    from embeddings.modelstore import folder_for

    cache = Path(options.cache_dir) if options.cache_dir else default_cache()
    return folder_for(options.model, options.database_url, cache)


class EmbedWorker:
    """The pool's actor: the model loaded once, a small connection pool, and
    one ``BatchEmbedder`` (async actor: one batch reads or writes while
    another encodes)."""

    def __init__(self, options: ReembedOptions) -> None:
        if options.nice:
            # Where lowering the priority is not allowed, run at normal priority.
            with contextlib.suppress(OSError):
                os.nice(options.nice)
        self.options = options
        # ONNX Runtime on the CPU (its sessions take the threads), PyTorch on
        # a GPU: the same encoder as the Embedder's, hence the same vectors.
        # A tuned version is read from the database into this node's model
        # cache first (embeddings/modelstore.py); its vectors are stored
        # under its name.
        self.encoder = Encoder(
            model_folder(options),
            ray_device(options.device),
            backend=options.backend,
            cache_dir=options.cache_dir or None,
            precision=options.precision,
            threads=options.torch_threads,
        )
        self._batches: BatchEmbedder | None = None

    def _embedder(self) -> BatchEmbedder:
        if self._batches is None:
            from storage.db import make_engine, make_sessionmaker

            engine = make_engine(self.options.database_url, pool_size=2, max_overflow=1)
            self._batches = BatchEmbedder(
                self.encoder, make_sessionmaker(engine), self.options.model
            )
        return self._batches

    async def ready(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "device": self.encoder.device,
            "dim": self.encoder.dim,
            "precision": self.encoder.precision,
        }

    async def embed(self, kind: str, item_ids: list[uuid.UUID]) -> BatchResult:
        return await self._embedder().embed(kind, item_ids)


class RayPool:
    """``concurrency`` EmbedWorker actors, started on first need (a job with
    nothing to do loads no model); each batch goes to the least busy."""

    def __init__(self, options: ReembedOptions, progress: Progress) -> None:
        self.options = options
        self.progress = progress
        self.actors: list[Any] = []
        self.busy: list[int] = []
        self.encoders: list[str] = []
        self._lock = asyncio.Lock()

    async def start(self) -> list[str]:
        """Start the actors (once); what they encode on ("cpu bf16", ...)."""
        async with self._lock:
            if self.actors:
                return self.encoders
            import ray

            o = self.options
            actor = ray.remote(EmbedWorker).options(  # type: ignore[attr-defined]
                num_cpus=o.num_cpus,
                num_gpus=o.num_gpus,
                # A crashed actor is restarted and its batches retried: a batch
                # re-reads what is stale, so running it twice is harmless.
                max_restarts=2,
                max_task_retries=2,
            )
            actors: list[Any] = [actor.remote(o) for _ in range(o.concurrency)]
            t0 = time.monotonic()
            try:
                ready = await asyncio.wait_for(
                    asyncio.gather(*[a.ready.remote() for a in actors]), o.ready_timeout_s
                )
            except ray.exceptions.RayActorError as exc:
                # An actor that could not load its model (a stored version
                # this node cannot read, say): the error says why.
                for a in actors:
                    ray.kill(a)
                cause = getattr(exc, "cause", None) or exc
                raise RuntimeError(f"the embedding actors could not start: {cause}") from None
            except TimeoutError:
                for a in actors:
                    ray.kill(a)
                raise TimeoutError(
                    f"the embedding actors were not ready after {o.ready_timeout_s:.0f}s "
                    f"(not enough free CPUs/GPUs? lower --num-cpus or --concurrency"
                    + (
                        "; with bf16 the first job on a machine also compiles the "
                        "encoder, kept for later jobs: run it again"
                        if o.precision in ("bf16", "auto")
                        else ""
                    )
                    + ")"
                ) from None
            self.actors, self.busy = actors, [0] * len(actors)
            self.encoders = sorted({f"{r['device']} {r['precision']}" for r in ready})
            devices = "/".join(self.encoders)
            self.progress.say(
                f"{len(actors)} actors ready in {time.monotonic() - t0:.1f}s (model "
                f"{o.model!r} on {devices}; {o.num_cpus:g} CPU, {o.num_gpus:g} GPU, "
                f"{o.torch_threads} torch threads each)"
            )
            return self.encoders

    async def submit(self, kind: str, item_ids: list[uuid.UUID]) -> BatchResult:
        await self.start()
        at = min(range(len(self.actors)), key=self.busy.__getitem__)
        self.busy[at] += 1
        try:
            result: BatchResult = await self.actors[at].embed.remote(kind, item_ids)
            return result
        finally:
            self.busy[at] -= 1

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)


# The raylet's settings a driver joining its cluster must share.
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")


def find_local_cluster(temp_dir: Path) -> tuple[str, dict[str, str]] | None:
    """The GCS address of a live local Ray node started with ``temp_dir`` (the
    one ``cairn run`` starts in the state folder), if any, with the token
    authentication settings it runs under."""
    import psutil

    want = temp_dir.resolve()
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            cmdline = proc.info.get("cmdline") or []
            if not cmdline or not cmdline[0].endswith("raylet"):
                continue
            flags = dict(a[2:].split("=", 1) for a in cmdline[1:] if a[:2] == "--" and "=" in a)
            if "gcs-address" in flags and Path(flags.get("temp_dir", "")).resolve() == want:
                env = proc.environ()
                return flags["gcs-address"], {k: env[k] for k in AUTH_ENV if k in env}
        except (psutil.Error, OSError, ValueError):
            continue
    return None


def service_index() -> Any | None:
    """A handle to the running service's VectorIndex on this cluster, if any."""
    from ray import serve

    try:
        app = serve.status().applications.get(APP_NAME)
    except Exception as exc:
        log.warning("cannot read the Serve status: %s", exc)
        return None
    if app is None or INDEX_DEPLOYMENT not in app.deployments:
        return None
    return serve.get_deployment_handle(INDEX_DEPLOYMENT, app_name=APP_NAME)


def cluster_cpus() -> tuple[float, float]:
    import ray

    return (
        float(ray.cluster_resources().get("CPU", 0.0)),
        float(ray.available_resources().get("CPU", 0.0)),
    )


def check_pool_fits(num_cpus: float, concurrency: int, say: Callable[[str], None]) -> None:
    """Refuse an actor pool bigger than the cluster; say so when it must wait
    for CPUs that what runs (a service's deployments) holds now."""
    need = num_cpus * concurrency
    total_cpus, free_cpus = cluster_cpus()
    if need > total_cpus + 1e-9:
        raise RuntimeError(
            f"the pool asks for {need:g} CPUs ({concurrency} x {num_cpus:g}) "
            f"but the cluster has {total_cpus:g}"
        )
    if need > free_cpus + 1e-9:
        say(
            f"waiting for {need:g} free CPUs ({free_cpus:g} free now); "
            f"lower --num-cpus to fit beside what runs"
        )


def job_cluster(
    address: str | None, local_temp_dir: Path | None, say: Callable[[str], None]
) -> str | None:
    """The cluster a batch job joins: ``address``, else the local service's
    (Ray started in ``local_temp_dir``, its auth setting put in the
    environment), else None (the job starts a Ray of its own)."""
    if address is None and local_temp_dir is not None:
        local = find_local_cluster(local_temp_dir)
        if local is not None:
            say("a local service is running: using its Ray cluster")
            address, auth = local
            # ray.init(address=...) turns token authentication on only when
            # told: use the local cluster's own setting (Ray's default for a
            # cluster it starts is a token in ~/.ray/auth_token).
            for key in AUTH_ENV:
                os.environ.pop(key, None)
            os.environ.update(auth or {"RAY_AUTH_MODE": "token"})
    return address


def join_or_start(
    address: str | None, temp_dir: Path | str | None, say: Callable[[str], None]
) -> None:
    """Join the Ray cluster at ``address``, else start a local Ray for a batch
    job (``cairn reembed``, ``tune``, ``rescreen``) with its files in ``temp_dir``."""
    import ray

    if address:
        say(f"joining the Ray cluster at {address}")
        ray.init(
            address=address,
            namespace=NAMESPACE,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        return
    say("starting a local Ray for the job")
    temp = str(temp_dir) if temp_dir else None
    if temp is not None:
        os.environ.setdefault("RAY_TMPDIR", temp)
    ray.init(
        namespace=NAMESPACE,
        _temp_dir=temp,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        logging_level=logging.WARNING,
    )


def run_on_ray(
    options: ReembedOptions,
    *,
    address: str | None,
    temp_dir: Path | None = None,
    out: TextIO | None = None,
) -> Summary:
    """Join the cluster at ``address`` (else start a local Ray in
    ``temp_dir``), run the job on an actor pool, swap, disconnect."""
    import ray

    progress = Progress(out)
    join_or_start(address, temp_dir, progress.say)
    try:
        check_pool_fits(options.num_cpus, options.concurrency, progress.say)
        pool = RayPool(options, progress)
        try:
            # The handle's own INFO lines would break into the progress output.
            logging.getLogger("ray.serve").setLevel(logging.WARNING)
            index = service_index() if options.activate else None

            async def activate(model: str) -> dict[str, int] | None:
                if index is None:
                    return None
                progress.say("building the new index in the running service")

                def call() -> dict[str, int]:
                    # Serve's blocking result() may not run on an event loop.
                    sizes: dict[str, int] = index.activate.remote(model).result(
                        timeout_s=options.activate_timeout_s
                    )
                    return sizes

                return await asyncio.to_thread(call)

            return asyncio.run(_run_job(options, pool, activate, progress))
        finally:
            pool.close()
    finally:
        ray.shutdown()


async def _run_job(
    options: ReembedOptions, pool: RayPool, activate: Activate, progress: Progress
) -> Summary:
    from storage.db import make_engine, make_sessionmaker

    engine = make_engine(options.database_url, pool_size=2, max_overflow=1)
    try:
        job = Job(
            options,
            make_sessionmaker(engine),
            pool.submit,
            activate=activate,
            progress=progress,
            warm_up=pool.start,
        )
        return await job.run()
    finally:
        await engine.dispose()


def main(
    options: ReembedOptions,
    *,
    address: str | None,
    local_temp_dir: Path | None,
    as_json: bool = False,
) -> int:
    """The command: join ``address``, else the local service's cluster (Ray
    started in ``local_temp_dir``), else a Ray of its own; exit status."""
    import json

    progress = Progress()
    address = job_cluster(address, local_temp_dir, progress.say)
    try:
        summary = run_on_ray(options, address=address, temp_dir=local_temp_dir)
    except KeyboardInterrupt:
        progress.say("interrupted; what was stored stays: rerun to resume")
        return 130
    except (RuntimeError, TimeoutError) as exc:
        progress.say(f"failed: {exc}; what was stored stays: rerun to resume")
        return 1
    if as_json:
        print(json.dumps(summary.as_dict()), flush=True)
    else:
        print(
            f"cairn reembed: {summary.embedded:,} rows embedded with {summary.model!r}, "
            f"{summary.skipped:,} already current; {summary.rows_per_s:,.1f} rows/s; "
            f"{'complete' if summary.complete else 'incomplete'}; "
            f"{ACTIVATED[summary.activated]}",
            flush=True,
        )
    return 0
