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
