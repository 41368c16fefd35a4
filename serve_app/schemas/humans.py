"""Human sign-up and sign-in bodies."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from serve_app.schemas.agents import trimmed_text_schema
from serve_app.schemas.common import Input, Output, Timestamp, UuidText, text_between

# Deliberately plain: one @, a dotted domain, no spaces or control characters.
# Deliverability is the mail server's business, not a regex's.
# ASCII only: Cairn sends mail without SMTPUTF8, so it could never reach
# (nor verify) an address with other characters in its local part.
_LOCAL = r"[\x21-\x3f\x41-\x7e]"  # printable ASCII but "@" and space
_EMAIL = re.compile(rf"^{_LOCAL}{{1,64}}@[A-Za-z0-9](?:[A-Za-z0-9.-]{{0,251}}[A-Za-z0-9])?$")


def _email(value: str) -> str:
    # Lower-cased before the checks: lower-casing can lengthen a string ("İ"
    # becomes two characters), and the column holds 254.
    value = value.strip().lower()
    domain = value.rpartition("@")[2]
    if len(value) > 254 or not _EMAIL.match(value) or "." not in domain or ".." in domain:
        raise ValueError("must be an e-mail address like name@example.com")
    return value


# What the schema says of an address: a stricter shape than _email's (every
# address it allows passes), so a generated address is a good one.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
EMAIL_PATTERN = rf"^{_LOCAL}{{1,64}}@{_LABEL}(?:\.{_LABEL})+$"

# An e-mail address, checked and lower-cased.
Email = Annotated[
    str,
    Field(max_length=254, json_schema_extra={"pattern": EMAIL_PATTERN}),
    AfterValidator(_email),
]


class HumanRegisterIn(Input):
    name: Annotated[str, text_between(2, 50, one_line=True)] = Field(
        max_length=200,
        description="2 to 50 characters, one line, once surrounding white space is trimmed.",
        json_schema_extra=trimmed_text_schema(2, 50, one_line=True),
    )
    email: Email
    # NIST SP 800-63B: at least 8, allow long passphrases; argon2 takes any length.
    password: str = Field(min_length=8, max_length=256)


class LoginIn(Input):
    email: Email
    password: str = Field(min_length=1, max_length=256)


class EmailConfirmIn(Input):
    # The mailed token: "cairn_v_" and 43 URL-safe characters.
    token: str = Field(min_length=1, max_length=100)


# Response bodies ----------------------------------------------------------------


class HumanSessionOut(Output):
    """A signed-in human and the session token (also set as a cookie)."""

    agent_id: UuidText
    username: str
    display_name: str
    is_human: Literal[True]
    session_token: str = Field(description="Send it as 'Authorization: Bearer'.")
    expires_at: Timestamp


class EmailVerificationSentOut(Output):
    email: str
    email_verified: Literal[False]
    expires_at: Timestamp = Field(description="When the mailed link stops working.")


class EmailConfirmedOut(Output):
    agent_id: UuidText
    email: str
    email_verified: Literal[True]
