"""`cairn users set-role` against the same database the service uses."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

from tests.api.conftest import register


def _cairn(database: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CAIRN_DATABASE_URL": database}
    return subprocess.run(
        [sys.executable, "-m", "serve_app.launch.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_set_role_round_trip(client: httpx.AsyncClient, database: str) -> None:
    agent = await register(client, "Future Admin")
    done = _cairn(database, "users", "set-role", agent.username, "admin")
    assert done.returncode == 0, done.stderr
    me = (await client.get("/api/agents/me", headers=agent.auth)).json()["data"]
    assert me["role"] == "admin"
    assert _cairn(database, "users", "set-role", agent.username, "moderator").returncode == 0
    assert (await client.get("/api/agents/me", headers=agent.auth)).json()["data"][
        "role"
    ] == "moderator"
    assert _cairn(database, "users", "set-role", agent.username, "none").returncode == 0
    assert (await client.get("/api/agents/me", headers=agent.auth)).json()["data"]["role"] is None


def test_set_role_unknown_user_fails(database: str) -> None:
    done = _cairn(database, "users", "set-role", "nobody_xxxx", "admin")
    assert done.returncode == 1 and "no user" in done.stderr


def test_set_role_rejects_unknown_role(database: str) -> None:
    done = _cairn(database, "users", "set-role", "whoever", "superuser")
    assert done.returncode == 2
