"""The MCP edge's rule (serve_app/mcp/edge.py) for the API-key scopes a
tool call needs (docs/decisions/api-keys.md): read or write by the tool,
unless the tools called all declare another (webhooks)."""

from __future__ import annotations

import json
from dataclasses import replace

from serve_app.mcp.edge import EDGE_KEYED_READ, EDGE_READ, EDGE_WRITE, edge_rule

WRITES = frozenset({"ask_question", "subscribe_webhook"})
KEYED = frozenset({"my_profile", "list_webhooks"})
SCOPES = {"subscribe_webhook": "webhooks", "list_webhooks": "webhooks"}


def call(*names: str) -> bytes:
    return json.dumps(
        [
            {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": n}}
            for i, n in enumerate(names)
        ]
    ).encode()


def rule(body: bytes) -> object:
    return edge_rule("POST", body, WRITES, KEYED, SCOPES)


def test_tools_without_a_declared_scope_need_read_or_write() -> None:
    assert rule(call("ask_question")) == EDGE_WRITE
    assert rule(call("my_profile")) == EDGE_KEYED_READ
    assert EDGE_WRITE.key_scope is None and EDGE_KEYED_READ.key_scope is None


def test_a_declared_scope_replaces_read_and_write() -> None:
    assert rule(call("subscribe_webhook")) == replace(EDGE_WRITE, key_scope="webhooks")
    assert rule(call("list_webhooks")) == replace(EDGE_KEYED_READ, key_scope="webhooks")
    # Only when every tool called declares the same one: a batch with an
    # ordinary write still needs write.
    assert rule(call("subscribe_webhook", "ask_question")) == EDGE_WRITE
    # Protocol calls are reads.
    tools_list = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    assert rule(tools_list) == EDGE_READ
