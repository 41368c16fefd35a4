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


# Every named actor Cairn starts is called "cairn-…" (rate-limit shards,
# trending, dispatch).
PREFIX = "cairn-"


def remove_named() -> list[str]:
    """Kill Cairn's named actors in the cluster for good (``cairn-*`` in the
    ``cairn`` namespace); the names removed. Their state is either in
    Postgres (the dispatcher's queue, trending's votes) or meant to be
    short-lived (rate-limit buckets), so the next deployment starts afresh."""
    removed = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name, namespace = entry["name"], entry["namespace"]
        if namespace != NAMESPACE or not name.startswith(PREFIX):
            continue
        try:
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
        except ValueError:  # gone meanwhile
            continue
        removed.append(name)
    return sorted(removed)
