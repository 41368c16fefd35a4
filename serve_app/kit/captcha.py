"""Captcha checks for appeals: a siteverify-style verifier when configured
(CAIRN_CAPTCHA_VERIFY_URL, e.g. hCaptcha or Cloudflare Turnstile), otherwise
the static test token (CAIRN_CAPTCHA_TEST_TOKEN) for development and tests."""

from __future__ import annotations

import hmac

from serve_app.kit.outbound import OutboundError, call_json
from serve_app.settings import Settings


class CaptchaUnavailable(Exception):
    """The verifier could not be reached or answered nonsense."""


async def verify(settings: Settings, token: str, remote_ip: str | None) -> bool:
    if settings.captcha_verify_url is None:
        return hmac.compare_digest(token.encode(), settings.captcha_test_token.encode())
    form = {"response": token}
    if settings.captcha_secret is not None:
        form["secret"] = settings.captcha_secret.get_secret_value()
    if remote_ip:
        form["remoteip"] = remote_ip
    try:
        reply = await call_json(
            "POST",
            settings.captcha_verify_url,
            form=form,
            timeout_s=settings.outbound_timeout_s,
            max_bytes=settings.outbound_max_bytes,
        )
    except OutboundError as exc:
        raise CaptchaUnavailable(str(exc)) from exc
    if reply.status != 200 or not isinstance(reply.body, dict):
        raise CaptchaUnavailable(f"the verifier answered {reply.status}")
    return reply.body.get("success") is True
