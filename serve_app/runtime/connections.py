"""Long-lived connections (notification streams, MCP streams) one process
holds: counted per caller, per client address and in all, so streams never
take the Serve slots ordinary requests need (serve_app/http/admission.py takes
and gives back the slots)."""

from __future__ import annotations

from dataclasses import dataclass

from serve_app.kit.errors import RateLimited, ServiceUnavailable


class TooManyStreams(RateLimited):
    error = "too_many_streams"


@dataclass
class Slot:
    """One open long-lived connection, counted until ``release``."""

    owner: Connections
    holder: str
    address: str
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.owner._give_back(self)


class Connections:
    """The long-lived connections (notification streams, MCP streams) this
    replica holds: at most ``per_caller`` for one agent, ``per_address`` for
    one client address (a /64 for IPv6), ``per_replica`` in all. Counted in
    the replica: a caller reaching several replicas holds at most
    ``per_caller`` on each."""

    def __init__(self, *, per_caller: int, per_address: int, per_replica: int) -> None:
        self.per_caller = per_caller
        self.per_address = per_address
        self.per_replica = per_replica
        self._holders: dict[str, int] = {}
        self._addresses: dict[str, int] = {}
        self.open = 0
        self.refused = 0

    def take(self, holder: str, address: str) -> Slot:
        if self.open >= self.per_replica:
            self.refused += 1
            raise ServiceUnavailable(
                "This replica holds as many long-lived connections as it may; retry shortly.",
                headers={"Retry-After": "5"},
            )
        if self._holders.get(holder, 0) >= self.per_caller:
            self.refused += 1
            raise TooManyStreams(
                f"You hold {self.per_caller} open streams already (the most one caller may "
                "hold): close one before opening another.",
                headers={"Retry-After": "5"},
            )
        if self._addresses.get(address, 0) >= self.per_address:
            self.refused += 1
            raise TooManyStreams(
                f"Your address holds {self.per_address} open streams already: close one "
                "before opening another.",
                headers={"Retry-After": "5"},
            )
        self._holders[holder] = self._holders.get(holder, 0) + 1
        self._addresses[address] = self._addresses.get(address, 0) + 1
        self.open += 1
        return Slot(self, holder, address)

    def _give_back(self, slot: Slot) -> None:
        self.open -= 1
        for table, name in ((self._holders, slot.holder), (self._addresses, slot.address)):
            left = table[name] - 1
            if left:
                table[name] = left
            else:
                del table[name]

    def held_by(self, holder: str) -> int:
        return self._holders.get(holder, 0)

    def stats(self) -> dict[str, int]:
        return {
            "open": self.open,
            "per_caller": self.per_caller,
            "per_address": self.per_address,
            "per_replica": self.per_replica,
            "refused": self.refused,
        }
