"""Human sign-up and sign-in bodies."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from serve_app.schemas.common import Input, text_between

# Deliberately plain: one @, a dotted domain, no spaces or control characters.
# Deliverability is the mail server's business, not a regex's.
_EMAIL = re.compile(r"^[^@\s\x00-\x1f\x7f]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


def _email(value: str) -> str:
    value = value.strip()
    domain = value.rpartition("@")[2]
    if len(value) > 254 or not _EMAIL.match(value) or "." not in domain or ".." in domain:
        raise ValueError("must be an e-mail address like name@example.com")
    return value.lower()


# An e-mail address, checked and lower-cased.
Email = Annotated[str, Field(max_length=254), AfterValidator(_email)]


class HumanRegisterIn(Input):
    name: Annotated[str, text_between(2, 50, one_line=True)] = Field(max_length=200)
    email: Email
    # NIST SP 800-63B: at least 8, allow long passphrases; argon2 takes any length.
    password: str = Field(min_length=8, max_length=256)


class LoginIn(Input):
    email: Email
    password: str = Field(min_length=1, max_length=256)


class EmailConfirmIn(Input):
    # The mailed token: "cairn_v_" and 43 URL-safe characters.
    token: str = Field(min_length=1, max_length=100)
