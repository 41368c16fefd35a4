"""A real SMTP server's handler for the tests (aiosmtpd): keeps what it
accepts, refuses on cue."""

from __future__ import annotations

import asyncio
import threading
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any


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
