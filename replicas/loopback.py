"""A Serve replica on a local Ray whose node address is loopback (the one
``cairn run`` starts): its inter-deployment gRPC server on that address too
(issue 45, M1; docs/decisions/ray-cluster.md, "The local Ray
node").

Ray Serve 2.60 starts that server on ``[::]:0`` (every interface) in
``ray/serve/_private/replica.py`` (``_on_initialized``), with no setting to
change it; every other listener of a local Ray follows the node's address.
The server starts after the deployment's constructor has run, so each
deployment calls ``bind_replica_grpc_to_node`` there: on a loopback node the
replica's call then binds the node's address. On a cluster (a node address
other nodes reach) nothing changes.
"""

from __future__ import annotations

import ipaddress
from typing import Any

_WILDCARDS = ("[::]:", "0.0.0.0:")


def on_loopback(node_ip: str) -> bool:
    """Whether the node's address is a loopback address."""
    try:
        return ipaddress.ip_address(node_ip).is_loopback
    except ValueError:
        return False


def node_address(address: str, node_ip: str) -> str:
    """``address`` with a wildcard host replaced by ``node_ip`` (port kept)."""
    for wildcard in _WILDCARDS:
        if address.startswith(wildcard):
            host = f"[{node_ip}]" if ":" in node_ip else node_ip
            return f"{host}:{address[len(wildcard) :]}"
    return address


def bind_replica_grpc_to_node() -> bool:
    """In a Serve replica of a loopback node, make its inter-deployment gRPC
    server bind the node's address; whether it did (idempotent)."""
    import ray
    from ray.serve._private import replica

    node_ip = ray.util.get_node_ip_address()
    if not on_loopback(node_ip):
        return False
    original = replica.add_port_to_grpc_server
    if getattr(original, "cairn_node_ip", None) == node_ip:
        return True

    def add_port_to_grpc_server(server: Any, address: str) -> int:
        port: int = original(server, node_address(address, node_ip))
        return port

    add_port_to_grpc_server.cairn_node_ip = node_ip  # type: ignore[attr-defined]
    replica.add_port_to_grpc_server = add_port_to_grpc_server
    return True
