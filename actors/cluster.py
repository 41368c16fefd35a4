"""Where the cluster's named actors live, and how every replica finds them."""

from __future__ import annotations

from typing import Any

import ray

NAMESPACE = "cairn"


def singleton(actor_class: Any, name: str, *args: Any) -> ray.actor.ActorHandle:
    """The named, detached actor every ingress replica finds: started with
    ``args`` by the first caller, looked up by the others."""
    handle: ray.actor.ActorHandle = actor_class.options(
        name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True
    ).remote(*args)
    return handle
