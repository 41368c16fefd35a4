"""The SMTP URL: parsed into a target, and refused by the settings when malformed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from actors.dispatch.mail import SmtpTarget, parse_smtp_url
from serve_app.settings import Settings


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("smtp://mail.example.org", SmtpTarget("mail.example.org", 25, False, False, None, None)),
        (
            "smtp://ada:p%40ss@mail.example.org:587?starttls=1",
            SmtpTarget("mail.example.org", 587, False, True, "ada", "p@ss"),
        ),
        ("smtp://h?starttls=true", SmtpTarget("h", 587, False, True, None, None)),
        ("smtps://u:p@h", SmtpTarget("h", 465, True, False, "u", "p")),
    ],
)
def test_smtp_urls(url: str, target: SmtpTarget) -> None:
    assert parse_smtp_url(url) == target


@pytest.mark.parametrize(
    "url", ["http://mail.example.org", "smtp://", "mail.example.org:25", "smtp://h:notaport"]
)
def test_bad_smtp_urls_stop_the_settings(url: str) -> None:
    with pytest.raises(ValueError):
        parse_smtp_url(url)
    with pytest.raises(ValidationError):
        Settings(smtp_url=url)


def test_unset_or_blank_means_no_mail() -> None:
    assert Settings().mail_enabled is False
    assert Settings(smtp_url="  ").mail_enabled is False
    assert Settings(smtp_url="smtp://h:2525").smtp_address == "smtp://h:2525"
