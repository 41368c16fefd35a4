"""benchmarks.profile_split: py-spy samples charged to the right component."""

from __future__ import annotations

from pathlib import Path

from benchmarks.profile_split import COMPONENTS, component, split_files

SP = "/venv/lib/python3.11/site-packages"
LIB = "/usr/lib/python3.11"


def frame(name: str, path: str) -> str:
    return f"{name} ({path}:10)"


def test_plumbing_is_charged_to_its_caller() -> None:
    stack = [
        frame("run", f"{LIB}/asyncio/events.py"),
        frame("_execute", f"{SP}/sqlalchemy/engine/base.py"),
        frame("wait", f"{LIB}/asyncio/tasks.py"),
        frame("__exit__", f"{LIB}/contextlib.py"),
    ]
    assert component(stack) == "SQLAlchemy/SQLModel"


def test_components_by_file() -> None:
    cases = {
        f"{SP}/ray/serve/_private/replica.py": "Serve replica wrapper and metrics",
        f"{SP}/ray/actor.py": "Ray actor calls",
        f"{SP}/uvicorn/protocols/http/httptools_impl.py": "uvicorn HTTP",
        f"{SP}/fastapi/routing.py": "FastAPI/Starlette",
        f"{SP}/pydantic/main.py": "pydantic and JSON",
        f"{SP}/psycopg/cursor_async.py": "psycopg",
        "/work/cairn/serve_app/app.py": "our middleware",
        "/work/cairn/serve_app/services/agents.py": "our routes, services, repositories",
        f"{LIB}/ipaddress.py": "asyncio, logging, stdlib",
    }
    for path, name in cases.items():
        assert component([frame("outer", f"{LIB}/threading.py"), frame("f", path)]) == name
    assert set(cases.values()) <= set(COMPONENTS)


def test_waiting_threads_are_dropped(tmp_path: Path) -> None:
    idle = f"{frame('<module>', 'default_worker.py')};{frame('Worker.main_loop', 'worker.py')}"
    busy = frame("execute", f"{SP}/psycopg/cursor_async.py")
    path = tmp_path / "spy.txt"
    path.write_text(f"{idle} 50\n{busy} 30\n{frame('f', f'{SP}/fastapi/routing.py')} 10\n")
    shares = split_files([path])
    assert shares["psycopg"] == 0.75 and shares["FastAPI/Starlette"] == 0.25
    assert abs(sum(shares.values()) - 1.0) < 1e-9


def test_admission_steps_by_innermost_named_frame() -> None:
    from benchmarks.profile_split import admission_part

    app = "/work/repo/serve_app"
    base = [
        frame("run", f"{LIB}/asyncio/events.py"),
        frame("gate", f"{app}/http/admission.py"),
        frame("admit", f"{app}/http/admission.py"),
    ]
    key_check = [
        *base,
        frame("_identify", f"{app}/http/admission.py"),
        frame("authenticate", f"{app}/http/admission.py"),
        frame("_execute", f"{SP}/sqlalchemy/engine/base.py"),
    ]
    budget = [
        *base,
        frame("charge", f"{app}/http/admission.py"),
        frame("hit", f"{app}/runtime/ratelimit.py"),
    ]
    ticker = [
        frame("run", f"{LIB}/asyncio/events.py"),
        frame("_tick", f"{app}/runtime/ratelimit.py"),
    ]
    route = [frame("run", f"{LIB}/asyncio/events.py"), frame("get_agent", f"{app}/routers/a.py")]
    assert admission_part(key_check) == "identify (API key check)"
    assert admission_part(budget) == "budgets (rate limit)"
    assert admission_part(ticker) == "budgets (rate limit)"  # the batched reports
    assert admission_part(base) == "admission, other"
    assert admission_part(route) is None


def test_admission_shares_are_of_all_busy_samples(tmp_path: Path) -> None:
    from benchmarks.profile_split import admission_files

    app = "/work/repo/serve_app"
    charge = frame("charge", f"{app}/http/admission.py")
    other = frame("get_agent", f"{app}/routers/a.py")
    path = tmp_path / "spy.txt"
    path.write_text(f"{charge} 30\n{other} 70\n")
    shares = admission_files([path])
    assert shares["budgets (rate limit)"] == 0.3
    assert shares["identify (API key check)"] == 0.0


def test_what_cairn_runs_only_under_serve_is_charged_whatever_it_calls() -> None:
    from benchmarks.profile_split import _SERVE_ONLY_LINES, SERVE_ONLY

    (ray_limiter,) = _SERVE_ONLY_LINES["serve_app/runtime/ratelimit.py"]
    inside, outside = ray_limiter[0] + 1, 70  # RayRateLimiter; LocalRateLimiter.hit
    assert not ray_limiter[0] <= outside <= ray_limiter[1]
    root = "/work/cairn"
    route = frame("read", f"{root}/serve_app/routers/agents.py")
    for stack in (
        [route, frame("inc", f"{root}/telemetry/metrics.py"), frame("record", f"{SP}/ray/x.py")],
        [
            route,
            f"hit ({root}/serve_app/runtime/ratelimit.py:{inside})",
            frame("r", f"{SP}/ray/a.py"),
        ],
        [route, frame("bind", f"{root}/replicas/loopback.py")],
    ):
        assert component(stack) == SERVE_ONLY, stack
    local = [route, f"hit ({root}/serve_app/runtime/ratelimit.py:{outside})"]
    assert component(local) == "our routes, services, repositories"
