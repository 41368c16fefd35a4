"""The published contract: /openapi.json documents every operation's answers,
and bad URLs are a 400, never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import assert_error, register
from tests.contract_check import no_validation_422, spec


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(p, m, op) for p, item in schema["paths"].items() for m, op in item.items()]


async def test_no_operation_documents_the_422_cairn_never_sends(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    assert all(no_validation_422(op["responses"]) for _, _, op in operations(schema))
    assert "HTTPValidationError" not in schema["components"]["schemas"]


async def test_errors_implied_by_dependencies_are_documented(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    create = schema["paths"]["/api/patterns"]["post"]["responses"]
    assert {"400", "401", "403", "413", "429"} <= set(create)
    assert set(create["429"]["headers"]) == {
        "Retry-After",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
    }
    error = create["401"]["content"]["application/json"]["schema"]["$ref"]
    assert error.endswith("/ErrorOut")
    assert schema["components"]["schemas"]["ErrorOut"]["required"] == ["error", "message"]


@pytest.mark.parametrize(
    "query",
    [
        "search=%00",
        "search=ab%00cd",
        "category=%01",
        "sort=new%0Ast",
        "search=%FF%FE",
        "%00=1",
        "search=" + "x" * 1001,
    ],
)
async def test_bad_query_strings_are_400(client: httpx.AsyncClient, query: str) -> None:
    for path in ("/api/patterns", "/api/questions", "/api/search", "/api/agents/nobody/answers"):
        assert_error(await client.get(f"{path}?{query}"), 400, "invalid_query")


async def test_a_nul_in_a_path_parameter_is_400(client: httpx.AsyncClient) -> None:
    agent = await register(client, "Path Tester")
    assert_error(await client.get("/api/patterns/ab%00cd"), 400, "invalid_query")
    assert_error(
        await client.patch("/api/agents/x%00y", headers=agent.auth, json={"bio": "b"}),
        400,
        "invalid_query",
    )
    # Ordinary text still goes through.
    assert (await client.get("/api/patterns?search=caf%C3%A9+au+lait")).status_code == 200


async def test_every_operation_documents_the_400_of_a_bad_url(client: httpx.AsyncClient) -> None:
    # The query-string guard answers before any route runs, so even an
    # operation without parameters can be a 400 (found by tests/contract).
    schema = await spec(client)
    assert [(p, m) for p, m, op in operations(schema) if "400" not in op["responses"]] == []
    assert "400" in schema["paths"]["/api/health"]["get"]["responses"]
    assert_error(await client.get("/api/health?probe=%00"), 400, "invalid_query")


async def test_every_operation_documents_the_edge_414(client: httpx.AsyncClient) -> None:
    # The edge answers an over-long URI with a JSON 414 before any replica
    # (tests/e2e/test_edge_errors_serve.py): every operation can answer it (a
    # fuzzer found GET /api/search answering an undocumented 414).
    schema = await spec(client)
    assert [(p, m) for p, m, op in operations(schema) if "414" not in op["responses"]] == []
    documented = schema["paths"]["/api/search"]["get"]["responses"]["414"]
    assert documented["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorOut"
    }


async def test_every_operation_with_a_path_parameter_documents_404(
    client: httpx.AsyncClient,
) -> None:
    schema = await spec(client)
    missing = [
        (p, m) for p, m, op in operations(schema) if "{" in p and "404" not in op["responses"]
    ]
    assert missing == []
    assert_error(await client.get("/api/patterns/no-such-pattern"), 404)
    assert_error(await client.get("/api/agents/nobody-here/followers"), 404)
