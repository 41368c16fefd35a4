"""E-mail: the SMTP URL, the message a notification becomes, and sending a
batch over one SMTP connection (stdlib smtplib, run in a thread).

``CAIRN_SMTP_URL`` forms:
    smtp://host[:port]                     plain (port 25)
    smtp://user:pass@host:587?starttls=1   STARTTLS, then AUTH
    smtps://user:pass@host[:465]           implicit TLS
"""

from __future__ import annotations

import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import format_datetime, formataddr
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from actors.dispatch import notices
from storage.models.base import utcnow
from storage.models.social import ALWAYS_MAILED_KINDS

# The kind of a Letter that carries an address-verification token.
VERIFY_EMAIL = "email_verification"

TIMEOUT_S = 15.0


@dataclass(frozen=True)
class SmtpTarget:
    host: str
    port: int
    implicit_tls: bool
    starttls: bool
    username: str | None
    password: str | None


def parse_smtp_url(url: str) -> SmtpTarget:
    """Read ``CAIRN_SMTP_URL``; ValueError (naming the problem) when it is malformed."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("smtp", "smtps"):
        raise ValueError("SMTP URL must start with smtp:// or smtps://")
    if not parts.hostname:
        raise ValueError("SMTP URL has no host")
    query = {k: v[-1].lower() for k, v in parse_qs(parts.query).items()}
    implicit = parts.scheme == "smtps"
    starttls = query.get("starttls", "0") in ("1", "true", "yes")
    try:
        port = parts.port or (465 if implicit else 587 if starttls else 25)
    except ValueError as exc:
        raise ValueError(f"SMTP URL has a bad port: {exc}") from None
    return SmtpTarget(
        host=parts.hostname,
        port=port,
        implicit_tls=implicit,
        starttls=starttls,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
    )


@dataclass(frozen=True)
class Letter:
    """What one outbox row says (all plain values, so it crosses threads)."""

    message_id: str
    to_address: str
    to_name: str
    # The bot the notification is for, when it goes to the human who claimed it.
    for_agent: str | None
    kind: str
    actor: str | None
    target_type: str | None
    target_title: str | None
    target_slug: str | None
    data: dict[str, Any]


def _one_line(text: str) -> str:
    """Header text on one line: titles and names may hold characters Python
    reads as line breaks (U+2028, U+0085, form feed…), which a header refuses."""
    return " ".join(text.splitlines())


def compose(letter: Letter, *, sender: str, base_url: str) -> EmailMessage:
    """The e-mail for one notification (or one address verification): a
    plain-text message whose Message-ID is the outbox row's, so a resend
    after a crash can be recognised."""
    if letter.kind == VERIFY_EMAIL:
        return _verification(letter, sender=sender, base_url=base_url)
    headline = notices.headline(
        letter.kind, letter.actor, letter.target_type, letter.target_title, letter.data
    )
    url = notices.link(base_url, letter.target_type, letter.target_slug)
    message = EmailMessage()
    message["From"] = sender
    name = "" if letter.for_agent else _one_line(letter.to_name)
    message["To"] = formataddr((name, letter.to_address))
    message["Subject"] = _one_line(f"[Cairn] {headline}")
    message["Date"] = format_datetime(utcnow())
    message["Message-ID"] = f"<{letter.message_id}@cairn>"
    message["Auto-Submitted"] = "auto-generated"
    if letter.for_agent:
        lines = ["Hello,", "", f"For your agent @{letter.for_agent}: {headline}."]
    else:
        lines = [f"Hello {letter.to_name},", "", f"{headline}."]
    if url:
        lines += ["", url]
    if letter.kind in ALWAYS_MAILED_KINDS:
        lines += [
            "",
            "Cairn always tells you of this, whatever your notification settings.",
            "If it was not you, someone holds your session: sign in again, issue the",
            "agent another key, and sign out everywhere else.",
        ]
    else:
        lines += [
            "",
            "You get this e-mail because of the Cairn notification settings of",
            f"{'@' + letter.for_agent if letter.for_agent else 'your account'}; change them with",
            f"PUT {base_url.rstrip('/')}/api/notifications/email.",
        ]
    message.set_content("\n".join(lines))
    return message


def _verification(letter: Letter, *, sender: str, base_url: str) -> EmailMessage:
    """The address-verification mail: the link with its one-time token."""
    base = base_url.rstrip("/")
    token = str(letter.data["token"])
    message = EmailMessage()
    message["From"] = sender
    message["To"] = formataddr((_one_line(letter.to_name), letter.to_address))
    message["Subject"] = "[Cairn] Confirm your e-mail address"
    message["Date"] = format_datetime(utcnow())
    message["Message-ID"] = f"<{letter.message_id}@cairn>"
    message["Auto-Submitted"] = "auto-generated"
    lines = [
        f"Hello {letter.to_name},",
        "",
        "Someone (we hope you) signed up to Cairn with this address, or asked",
        "for a new confirmation token. To confirm the address, send",
        "",
        f"POST {base}/api/humans/email/confirm",
        f'{{"token": "{token}"}}',
        "",
        f"The token works once and expires at {letter.data.get('expires_at', '')} (UTC).",
        "Until the address is confirmed, Cairn sends it no other e-mail.",
        "If this was not you, ignore this message.",
    ]
    message.set_content("\n".join(lines))
    return message


class Permanent(Exception):
    """The server refused the message for good (a 5xx reply): no retry."""


def _refusal(exc: Exception) -> Exception:
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = [code for code, _ in exc.recipients.values()]
        if codes and all(code >= 500 for code in codes):
            return Permanent(f"recipient refused: {exc.recipients}")
    if isinstance(exc, smtplib.SMTPResponseException) and exc.smtp_code >= 500:
        return Permanent(f"{exc.smtp_code} {exc.smtp_error!r}")
    return exc


def send_batch(target: SmtpTarget, messages: list[EmailMessage]) -> list[Exception | None]:
    """Send each message over one connection (blocking: run it in a thread).

    Returns one entry per message: None when the server accepted it, else the
    error (``Permanent`` for a refusal that retrying cannot fix). When the
    connection itself fails, that error stands for every message not yet sent.
    """
    results: list[Exception | None] = []
    context = ssl.create_default_context()
    try:
        smtp: smtplib.SMTP
        if target.implicit_tls:
            smtp = smtplib.SMTP_SSL(target.host, target.port, timeout=TIMEOUT_S, context=context)
        else:
            smtp = smtplib.SMTP(target.host, target.port, timeout=TIMEOUT_S)
        with smtp:
            if target.starttls:
                smtp.starttls(context=context)
            if target.username:
                smtp.login(target.username, target.password or "")
            for message in messages:
                try:
                    smtp.send_message(message)
                    results.append(None)
                except (smtplib.SMTPRecipientsRefused, smtplib.SMTPResponseException) as exc:
                    results.append(_refusal(exc))
                    if isinstance(exc, smtplib.SMTPResponseException) and exc.smtp_code == 421:
                        raise  # the server is closing the connection
    except (OSError, smtplib.SMTPException) as exc:
        # Connecting, TLS or AUTH failed, or the connection broke: nothing
        # wrong with the messages themselves, so they are all retried.
        results += [exc] * (len(messages) - len(results))
    return results
