"""The edge rule of the MCP door: which admission rule one HTTP request to
``/mcp`` is checked under, read from the JSON-RPC message it carries, before
any session starts (each call is admitted again inside, ``door.Door.run``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace

from serve_app.http import admission
from serve_app.kit import keys

# JSON-RPC methods admitted one by one by the door (``Door.run``) with the
# rule of the REST route each stands for; everything else the transport
# answers (initialize, ping, tools/list, resources/list, notifications, …)
# counts the caller's read budget.
PER_CALL_METHODS = frozenset({"tools/call", "resources/read"})
# Methods whose answer is a stream that stays open.
STREAM_METHODS = frozenset({"subscriptions/listen"})


# At the edge an OAuth access token needs ``cairn:read`` (protocol calls,
# streams); each tool call is admitted again inside with its own scope.
EDGE_READ = replace(admission.READ, scope=keys.READ_SCOPE, reads=True)
EDGE_STREAM = replace(admission.KEYED_STREAM, scope=keys.READ_SCOPE, reads=True)
# A write tool call: a credential with ``cairn:write`` must come with it (401
# or 403 with a challenge here, before any session starts); only identified:
# the call itself counts the budgets inside (``Door.run``).
EDGE_WRITE = admission.Policy("required", anonymous=None, scope=keys.WRITE_SCOPE, counted=False)
# A read tool that needs a key (your profile, your notifications): the same,
# with the read scope.
EDGE_KEYED_READ = admission.Policy(
    "required", anonymous=None, scope=keys.READ_SCOPE, counted=False, reads=True
)
# Any other tool call or resource read: a credential sent is checked here (a
# bad or expired token is a 401 with the challenge), nothing is counted: the
# call inside counts under the rule of the REST route it stands for.
EDGE_CALL = admission.Policy(
    "optional", anonymous=None, scope=keys.READ_SCOPE, counted=False, reads=True
)


def edge_rule(
    method: str,
    body: bytes | None,
    write_tools: frozenset[str] = frozenset(),
    keyed_reads: frozenset[str] = frozenset(),
    key_scopes: Mapping[str, str] | None = None,
) -> admission.Policy:
    """The admission rule of one HTTP request to /mcp (the door translates a
    JSON-RPC message into the rule; admission applies it). The GET stream and
    ``subscriptions/listen`` are long-lived: they need a key and hold one of
    its connection slots. A call of one of ``write_tools`` needs a credential
    with the write scope, one of ``keyed_reads`` a credential with the read
    scope. ``key_scopes``: the API-key scope a tool's REST route declares
    (``needs_scope``, e.g. ``webhooks``), which an API key needs for it here
    instead of ``read`` or ``write``."""
    if method == "GET":
        return EDGE_STREAM
    if method != "POST" or body is None:
        return EDGE_READ
    try:
        parsed = json.loads(body)
    except ValueError:
        return EDGE_READ  # the transport answers the parse error
    messages = [
        m for m in (parsed if isinstance(parsed, list) else [parsed]) if isinstance(m, dict)
    ]
    methods = {m.get("method") for m in messages}
    if methods & STREAM_METHODS:
        return EDGE_STREAM
    if methods and methods <= PER_CALL_METHODS:
        called = set()
        for message in messages:
            params = message.get("params")
            if message.get("method") == "tools/call" and isinstance(params, dict):
                called.add(params.get("name"))
        if called & write_tools:
            return _declared(EDGE_WRITE, called, key_scopes)
        if called & keyed_reads:
            return _declared(EDGE_KEYED_READ, called, key_scopes)
        return EDGE_CALL
    return EDGE_READ


def _declared(
    policy: admission.Policy, called: set[object], key_scopes: Mapping[str, str] | None
) -> admission.Policy:
    """``policy`` with the API-key scope the called tools' routes declare,
    when they all declare the same one (docs/decisions/api-keys.md)."""
    if not key_scopes or not called:
        return policy
    declared = {key_scopes.get(name) if isinstance(name, str) else None for name in called}
    if len(declared) == 1 and (scope := declared.pop()) is not None:
        return replace(policy, key_scope=scope)
    return policy
