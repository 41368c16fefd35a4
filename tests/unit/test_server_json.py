"""server.json, Cairn's MCP Registry entry, against the registry's published
schema (docs/registry/server.schema.json, copied: the tests run offline) and
against the running configuration it describes."""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator

from serve_app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs/registry/server.schema.json").read_text())
ENTRY = json.loads((ROOT / "server.json").read_text())


def problems(entry: dict[str, Any]) -> list[str]:
    validator = Draft7Validator(SCHEMA, format_checker=Draft7Validator.FORMAT_CHECKER)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(entry)]


def test_the_schema_is_the_registry_s() -> None:
    Draft7Validator.check_schema(SCHEMA)
    assert SCHEMA["$id"] == ENTRY["$schema"]
    assert (ROOT / "docs/registry/server.schema.json").stat().st_size == 17_394


def test_server_json_is_valid() -> None:
    assert problems(ENTRY) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("name",), "no-slash-in-the-name"),
        (("description",), "x" * 101),
        (("remotes", 0, "type"), "websocket"),
        (("version",), None),
    ],
)
def test_the_schema_refuses_a_broken_entry(path: tuple[Any, ...], value: Any) -> None:
    broken = copy.deepcopy(ENTRY)
    target: Any = broken
    for key in path[:-1]:
        target = target[key]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    assert problems(broken)


def test_server_json_describes_the_default_deployment() -> None:
    base = Settings().base_url
    (remote,) = ENTRY["remotes"]
    assert remote == {**remote, "type": "streamable-http", "url": f"{base}/mcp"}
    auth = ENTRY["_meta"]["io.modelcontextprotocol.registry/publisher-provided"]["authorization"]
    assert auth["protectedResourceMetadata"] == f"{base}/.well-known/oauth-protected-resource/mcp"
    assert auth["authorizationServerMetadata"] == f"{base}/.well-known/oauth-authorization-server"
    assert auth["scopes"] == ["cairn:read", "cairn:write"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert ENTRY["version"] == project["version"]
