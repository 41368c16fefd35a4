"""Every answer the API tests receive, checked against /openapi.json: the
status must be documented for the operation, and a JSON body must match the
documented schema with no undocumented field (``additionalProperties`` is
made false for every documented object, so a field the service sends but the
contract does not list is caught here, while production passes it through)."""

from __future__ import annotations

import copy
import re
from functools import cached_property
from typing import Any

import httpx
from jsonschema import Draft202012Validator


def _closed(node: Any) -> Any:
    """The schema with every object that lists its properties closed."""
    if isinstance(node, dict):
        out = {k: _closed(v) for k, v in node.items()}
        if "properties" in out and out.get("type", "object") == "object":
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_closed(v) for v in node]
    return node


class Contract:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec

    @cached_property
    def _closed_spec(self) -> dict[str, Any]:
        closed: dict[str, Any] = _closed(copy.deepcopy(self.spec))
        return closed

    @cached_property
    def _paths(self) -> list[tuple[re.Pattern[str], str]]:
        out = []
        for template in self.spec["paths"]:
            # Literal segments before parameters: /api/agents/me beats /api/agents/{username}.
            regex = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
            out.append((re.compile(regex), template))
        out.sort(key=lambda pair: pair[1].count("{"))
        return out

    def operation(self, method: str, path: str) -> tuple[str, dict[str, Any]] | None:
        for regex, template in self._paths:
            if regex.match(path):
                found = self.spec["paths"][template].get(method.lower())
                if found is not None:
                    return template, found
        return None

    def problems(self, response: httpx.Response) -> list[str]:
        """What in this answer the contract does not say (empty: conforms)."""
        request = response.request
        path = request.url.path
        if not path.startswith("/api/"):
            return []
        found = self.operation(request.method, path)
        if found is None:
            return []  # an unknown route: the 404/405 error shape is tested elsewhere
        template, op = found
        where = f"{request.method} {template} -> {response.status_code}"
        documented = op.get("responses", {})
        answer = documented.get(str(response.status_code)) or documented.get("default")
        if answer is None:
            return [f"{where}: status not documented ({sorted(documented)})"]
        content = answer.get("content", {})
        if not response.headers.get("content-type", "").startswith("application/json"):
            return []
        schema = content.get("application/json", {}).get("schema")
        if schema is None:
            return [f"{where}: JSON body but no JSON schema documented"]
        body = response.json()
        # The whole (closed) spec is the root, so "#/components/..." resolves.
        root = {**self._closed_spec, "$defs": {"answer": _closed(schema)}, "$ref": "#/$defs/answer"}
        validator = Draft202012Validator(root)
        return [
            f"{where}: {'/'.join(map(str, e.absolute_path)) or '(body)'}: {e.message[:300]}"
            for e in validator.iter_errors(body)
        ][:5]


# Reading /openapi.json in the contract tests -------------------------------------


async def spec(client: httpx.AsyncClient) -> dict[str, Any]:
    """The app's /openapi.json."""
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its $ref followed to the component it names."""
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def body_schema(schema: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of one documented answer."""
    return dict(answer["content"]["application/json"]["schema"])


def no_validation_422(responses: dict[str, Any]) -> bool:
    """FastAPI's validation 422 is never documented; a reused Idempotency-Key's is, where keyed."""
    return "422" not in responses or "Idempotency-Key" in responses["422"]["description"]
