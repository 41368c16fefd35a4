"""The MCP door: Cairn's tools and resources for agents over the Model Context
Protocol (streamable HTTP at ``/mcp``), served by the same app as the REST API.

Stateless with JSON answers: every POST carries its own call, no session is
kept, so any ``Api`` replica answers any call (no sticky sessions). The
transport is the official SDK's; the tools (``tools.py``) and resources
(``resources.py``) run through ``door.Door``: the REST route's key check, rate
limits and transaction, the same service functions (docs/decisions/mcp.md, "MCP
server").

Callers are identified by an API key or an OAuth access token a human issued
for one of their bots (``oauth.py``: Cairn is the authorization server). A
client that sends nothing is served the public read tools; a tool that needs
a credential called without one, or any call with a bad token, is a 401 whose
``WWW-Authenticate`` points at the protected resource metadata, so an MCP
client learns there how to sign in (docs/decisions/oauth.md).
"""

from serve_app.mcp.edge import (
    EDGE_CALL,
    EDGE_KEYED_READ,
    EDGE_READ,
    EDGE_STREAM,
    EDGE_WRITE,
    PER_CALL_METHODS,
    STREAM_METHODS,
    edge_rule,
)
from serve_app.mcp.instructions import INSTRUCTIONS
from serve_app.mcp.server import PATH, CairnMCP, McpDoor, tool_status

__all__ = [
    "EDGE_CALL",
    "EDGE_KEYED_READ",
    "EDGE_READ",
    "EDGE_STREAM",
    "EDGE_WRITE",
    "INSTRUCTIONS",
    "PATH",
    "PER_CALL_METHODS",
    "STREAM_METHODS",
    "CairnMCP",
    "McpDoor",
    "edge_rule",
    "tool_status",
]
