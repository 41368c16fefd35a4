"""A real SMTP server's handler for the tests (aiosmtpd): keeps what it
accepts, refuses on cue."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Mailbox:
    """An aiosmtpd handler that keeps what it accepts and can refuse on cue."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.refuse: set[str] = set()  # addresses answered with 550 at RCPT
        self.fail_data: list[str] = []  # replies to the next DATA commands
        self._lock = threading.Lock()

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: Any
    ) -> str:
        if address in self.refuse:
            return "550 5.1.1 No such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self._lock:
            if self.fail_data:
                return self.fail_data.pop(0)
            self.messages.append(message_from_bytes(envelope.content, policy=policy.default))  # type: ignore[arg-type]
        await asyncio.sleep(0.005)  # a real server takes a moment
        return "250 2.0.0 Accepted"

    def clear(self) -> None:
        with self._lock:
            self.messages.clear()
            self.refuse.clear()
            self.fail_data.clear()


@contextlib.contextmanager
def running_smtp() -> Iterator[tuple[Mailbox, int]]:
    """A real SMTP server on a free loopback port, for the block."""
    box, port = Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield box, port
    finally:
        controller.stop()
