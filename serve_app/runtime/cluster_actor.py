"""A named cluster actor as the routes see it: every call has a deadline, and
a handle whose actor is gone for good is replaced by looking it up (or
starting it) again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class ClusterActor:
    def __init__(self, label: str, find: Callable[[], Any], timeout_s: float = 2.0) -> None:
        self._label = label
        self._find = find
        self._handle = find()
        self._timeout_s = timeout_s

    async def call(self, method: str, *args: Any) -> Any:
        """The method's result, or TimeoutError after the deadline. A call that
        misses it is not cancelled: it still reaches the actor (Ray keeps it
        queued while the actor restarts)."""
        from ray.exceptions import RayActorError

        future = asyncio.wrap_future(getattr(self._handle, method).remote(*args).future())
        done, _ = await asyncio.wait({future}, timeout=self._timeout_s)
        if not done:
            raise TimeoutError(f"{self._label} did not answer {method} in {self._timeout_s} s")
        try:
            return future.result()
        except RayActorError:
            # Gone for good (not just restarting): look it up, or start it, again.
            self._handle = self._find()
            raise

    def send(self, method: str, *args: Any) -> None:
        """Fire and forget; a handle that cannot send is replaced, then the error raised."""
        try:
            getattr(self._handle, method).remote(*args)
        except Exception:
            self._handle = self._find()
            raise
