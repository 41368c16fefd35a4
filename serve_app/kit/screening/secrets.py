"""Secrets in text: detect-secrets' provider plugins plus Cairn's own rules.

detect-secrets' regex plugins run in memory on the field's text (no files, no
baseline, no verification calls: ``analyze_string`` only). Its noisy plugins
(keyword, generic high entropy, IP addresses, Artifactory, the IBM and
SoftLayer keyword rules) are left out; Cairn's own rules cover connection
strings, secret-looking assignments, private keys, JWTs, newer provider
formats and Cairn's own keys, each with a placeholder check so documentation
(``YOUR_API_KEY``, ``sk-...``, ``<token>``, ``${VAR}``) passes.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

from serve_app.kit.screening.normalize import AnchorSet

# detect-secrets plugin → the kind Cairn reports.
_PLUGINS: tuple[tuple[str, RegexBasedDetector], ...] = (
    ("aws_access_key", AWSKeyDetector()),
    ("azure_storage_key", AzureStorageKeyDetector()),
    ("discord_token", DiscordBotTokenDetector()),
    ("github_token", GitHubTokenDetector()),
    ("gitlab_token", GitLabTokenDetector()),
    ("mailchimp_key", MailchimpDetector()),
    ("npm_token", NpmDetector()),
    ("openai_key", OpenAIDetector()),
    ("pypi_token", PypiTokenDetector()),
    ("sendgrid_key", SendGridDetector()),
    ("slack_token", SlackDetector()),
    ("square_oauth_secret", SquareOAuthDetector()),
    ("stripe_key", StripeDetector()),
    ("telegram_token", TelegramBotTokenDetector()),
    ("twilio_key", TwilioKeyDetector()),
)
# A cheap gate per plugin: its regexes run only where the text has one of
# these substrings or a match of this regex (each with a literal first
# character, which the regex engine skips to at C speed), which keeps a
# 64 KB field well under the time budget.
_GATES: dict[str, tuple[str, ...] | re.Pattern[str] | None] = {
    "aws_access_key": ("AKIA", "ASIA", "ABIA", "ACCA", "A3T", "aws_secret", "AWS_SECRET", "secret_access"),
    "azure_storage_key": ("AccountKey=",),
    "discord_token": re.compile(r"\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}"),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "gitlab_token": ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "GR1348941", "glcbt-", "glimt-",
                     "glptt-", "glagent-", "gloas-"),
    "mailchimp_key": re.compile(r"-us\d"),
    "npm_token": ("_authToken",),
    "openai_key": ("T3BlbkFJ",),
    "pypi_token": ("pypi-",),
    "sendgrid_key": ("SG.",),
    "slack_token": ("xox", "XOX", "hooks.slack.com"),
    "square_oauth_secret": ("sq0csp-",),
    "stripe_key": ("k_live_",),
    "telegram_token": re.compile(r":[0-9A-Za-z_-]{35}"),
    # None: no gate; the plugin's regexes start with a literal ("AC", "SK"),
    # which the regex engine finds faster than any gate would.
    "twilio_key": None,
}  # fmt: skip


# Every literal the rules below look for first, found in one pass.
_LITERALS = (
    "cairn_",
    "PRIVATE KEY",
    "PuTTY-User-Key-File",
    "eyJ",
    "earer",
    "hf_",
    "sk-",
    "AIza",
    "github_pat_",
    "://",
)
# One group per plugin (its gate's substrings; none for a regex gate), then
# the literals: the groups found say which plugins' gates are open.
_PRESENT = AnchorSet(
    *(g if isinstance(g, tuple) else () for g in (_GATES[kind] for kind, _ in _PLUGINS)),
    _LITERALS,
)


def _gate_open(gate: tuple[str, ...] | re.Pattern[str] | None, text: str, found: bool) -> bool:
    """Whether a plugin's regexes run: ``found``, one of its substrings was."""
    if gate is None:
        return True
    if isinstance(gate, re.Pattern):
        return gate.search(text) is not None
    return found


# Cairn's own formats (serve_app/kit/keys.py): API keys carry a public key id.
CAIRN_KEY = re.compile(r"(?<![A-Za-z0-9_-])cairn_([0-9a-f]{12})_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])")
_CAIRN_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_-])cairn_(?:s|at|rt|ac)_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"
)

_PROVIDERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("anthropic_key", re.compile(r"sk-ant-[a-z]{3,6}\d{2}-[A-Za-z0-9_-]{80,}")),
    ("openai_key", re.compile(r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,}")),
    ("google_api_key", re.compile(r"AIza[0-9A-Za-z_-]{35}")),
    ("huggingface_token", re.compile(r"\bhf_[A-Za-z]{34}\b")),
    ("github_token", re.compile(r"github_pat_[A-Za-z0-9_]{60,}")),
)

_PROVIDER_ANCHORS = {
    "anthropic_key": "sk-",
    "openai_key": "sk-",
    "google_api_key": "AIza",
    "huggingface_token": "hf_",
    "github_token": "github_pat_",
}

_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----\s*"
    r"(?:[A-Za-z-]+: [^\n]*\n\s*)*([A-Za-z0-9+/=\s]{60,})"
)
_PUTTY_KEY = re.compile(
    r"PuTTY-User-Key-File-\d: .*\n(?:.*\n){0,6}?Private-Lines: \d+\s*\n\s*[A-Za-z0-9+/=]{40,}"
)
_JWT = re.compile(
    r"(?<![A-Za-z0-9_-])(eyJ[A-Za-z0-9_-]{8,})\.(eyJ[A-Za-z0-9_-]{8,})\.([A-Za-z0-9_-]{16,})"
)
_CONN = re.compile(
    r"\b[a-z][a-z0-9+.-]{1,30}://([^\s:/@'\"<>{}()]{1,64}):([^\s/@'\"<>]{1,128})@[^\s/@'\"<>]{2,}",
    re.IGNORECASE,
)
_SECRET_NAME = (
    r"(?:api[_-]?key|apikey|secret(?:[_-]?key)?|client[_-]?secret|access[_-]?token|auth[_-]?token|"
    r"refresh[_-]?token|bearer[_-]?token|private[_-]?key|access[_-]?key(?:[_-]?id)?|"
    r"secret[_-]?access[_-]?key|password|passwd|pwd|token|credentials?|signing[_-]?key|"
    r"webhook[_-]?secret|session[_-]?secret|encryption[_-]?key)"
)
# NAME = "value", NAME: 'value', "NAME": "value", NAME=value (env files).
_ASSIGN = re.compile(
    r"(?i)"
    + _SECRET_NAME
    + r"[\w-]*[\"']?\s*(?::=|=>|=|:)\s*(?:[\"']([^\"'\s]{12,})[\"']|([^\s\"'`,;(){}\[\]]{16,})(?=\s|$))"
)
_NAME_ANCHORS = ("key", "secret", "token", "passw", "pwd", "credential")
_NAMES = AnchorSet(_NAME_ANCHORS)
# What must follow an anchor inside a secret name for ``_ASSIGN`` to match
# there: the rest of the name, an optional quote, the operator. Checked at
# each anchor first ("keyboard shortcut", "tokenizer" fail at once), so the
# assignment regex, an alternation tried at every position, runs only near
# real assignments.
_NAME_TAIL = re.compile(r"[\w-]*[\"']?\s*(?::=|=>|=|:)")
# The longest part of a secret name before its anchor ("secret_access_" of
# "secret_access_key").
_NAME_LEAD = 16
_BEARER = re.compile(r"(?i)\b(?:authorization\s*[:=]\s*[\"']?)?bearer\s+([A-Za-z0-9._~+/-]{24,}=*)")

_PLACEHOLDER_WORDS = (
    "your",
    "xxx",
    "...",
    "…",
    "<",
    ">",
    "${",
    "{{",
    "}}",
    "example",
    "sample",
    "placeholder",
    "dummy",
    "fake",
    "redacted",
    "changeme",
    "change_me",
    "replace",
    "insert",
    "***",
    "todo",
    "secret_here",
    "here",
    "000000",
    "123456",
    "abcdef",
    "my_",
    "my-",
    "env[",
    "getenv",
    "environ",
    "process.env",
    "$(",
    "%(",
    "none",
    "null",
    "undefined",
    "mock",
    "test_key",
    "testkey",
    "foobar",
)
_DUMMY_PASSWORDS = frozenset(
    [
        "password",
        "passwd",
        "pass",
        "pw",
        "pwd",
        "secret",
        "changeme",
        "example",
        "test",
        "tester",
        "testing",
        "postgres",
        "root",
        "admin",
        "guest",
        "user",
        "username",
        "mysecretpassword",
        "mypassword",
        "foo",
        "bar",
        "baz",
        "dummy",
        "default",
        "toor",
        "qwerty",
        "letmein",
        "hunter2",
        "tiger",
        "scott",
        "s3cr3t",
        "p@ssw0rd",
        "password1",
        "password123",
        "123456",
        "1234",
        "12345",
        "12345678",
        "pa55word",
        "pass123",
        "secretpassword",
        "supersecret",
        "mysql",
        "redis",
        "rabbitmq",
        "airflow",
        "minio",
        "minioadmin",
        "django",
        "rails",
        "app",
        "postgrespassword",
        "postgrespw",
        "docker",
        "demo",
        "local",
        "dev",
        "devpassword",
    ]
)


@dataclass(frozen=True)
class SecretHit:
    kind: str
    offset: int
    value: str  # kept in memory for Cairn-key revocation only; never reported


def is_placeholder(value: str) -> bool:
    """True for documentation stand-ins rather than real credentials."""
    low = value.lower()
    if any(w in low for w in _PLACEHOLDER_WORDS):
        return True
    if value.startswith("$") or value.startswith("%") or value.endswith("%"):
        return True
    core = re.sub(r"[^A-Za-z0-9]", "", value)
    # One repeated character, or a short alphabet: xxxx, 0000, aaaa-bbbb.
    return len(set(core.lower())) <= 3


def entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _looks_random(value: str) -> bool:
    if len(value) < 16 or is_placeholder(value):
        return False
    # Identifiers and words (snake_case, dotted names, paths, URLs) are not
    # tokens: a token mixes digits with letters and has high entropy.
    if not re.search(r"\d", value) or not re.search(r"[A-Za-z]", value):
        return False
    if re.fullmatch(r"[a-z_.]+\d?|[\w.]+\(\)?|[A-Z_]+", value):
        return False
    if "/" in value and not re.fullmatch(r"[A-Za-z0-9+/=_-]+", value):
        return False
    hexish = re.fullmatch(r"[0-9a-fA-F-]+", value) is not None
    return entropy(value) >= (3.0 if hexish else 3.5)


def _jwt_is_example(payload: str) -> bool:
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        claims = json.loads(raw)
    except (binascii.Error, ValueError):
        return False
    if not isinstance(claims, dict):
        return True
    # jwt.io's sample token, everywhere in documentation.
    return claims.get("sub") == "1234567890" or claims.get("name") == "John Doe"


def _jwt_header_ok(header: str) -> bool:
    try:
        raw = base64.urlsafe_b64decode(header + "=" * (-len(header) % 4))
        return isinstance(json.loads(raw), dict)
    except (binascii.Error, ValueError):
        return False


def _assignments(text: str) -> Iterator[re.Match[str]]:
    """``_ASSIGN.finditer(text)``, tried only at the few places it can start:
    just before an anchor of a secret name that an assignment operator
    follows."""
    # U+0130 (İ) is the one character that changes length when lowered
    # ("i" and a combining dot): offsets in ``low`` must be offsets in
    # ``text``. It matches "i" under the regex's IGNORECASE, so it is lowered
    # to that. (A full ``finditer`` instead cost a 64 KB field 15 ms: the
    # slowest screens of the benchmark were those with one Turkish capital.)
    low = (text.replace("\u0130", "i") if "\u0130" in text else text).lower()
    scanner = _NAMES.scan(low)
    starts = sorted(
        (i, len(anchor))
        for anchor in scanner.present()
        for i in scanner.positions(anchor)
        if _NAME_TAIL.match(text, i + len(anchor))
    )
    end = 0
    for i, _ in starts:
        # The leftmost start wins, as with finditer; a name starts at most
        # _NAME_LEAD characters before its anchor.
        for start in range(max(end, i - _NAME_LEAD), i + 1):
            m = _ASSIGN.match(text, start)
            if m:
                end = m.end()
                yield m
                break


def _matches_at(rx: re.Pattern[str], text: str, starts: list[int]) -> Iterator[re.Match[str]]:
    """``rx.finditer(text)`` for a regex whose matches can only start at
    ``starts`` (its literal anchor): one ``match`` at each, not a search that
    tries every position of the field."""
    end = 0
    for i in sorted(starts):
        if i < end:
            continue
        m = rx.match(text, i)
        if m:
            end = m.end()
            yield m


def find_secrets(text: str) -> Iterator[SecretHit]:
    """Every secret-looking value in ``text`` with its offset."""
    scanner = _PRESENT.scan(text)
    present = scanner.present()
    groups = scanner.groups()
    for index, (kind, plugin) in enumerate(_PLUGINS):
        if not _gate_open(_GATES[kind], text, index in groups):
            continue
        # The plugin's own regexes, whole matches: analyze_string() yields a
        # regex's first group where it has one ("ghp" of a GitHub token).
        for rx in plugin.denylist:
            for m in rx.finditer(text):
                value = m.group(0).strip(" \t\"'=:")
                if value and not is_placeholder(value):
                    yield SecretHit(kind, m.start(), value)
    if "cairn_" in present:
        for m in CAIRN_KEY.finditer(text):
            if not is_placeholder(m.group(0)[19:]):
                yield SecretHit("cairn_api_key", m.start(), m.group(0))
        for m in _CAIRN_TOKEN.finditer(text):
            if not is_placeholder(m.group(0)):
                yield SecretHit("cairn_token", m.start(), m.group(0))
    for kind, rx in _PROVIDERS:
        # Each provider's format starts with a literal anchor: skip the regex
        # (a pass over the whole field) when the anchor is absent.
        if _PROVIDER_ANCHORS[kind] not in present:
            continue
        for m in _matches_at(rx, text, scanner.positions(_PROVIDER_ANCHORS[kind])):
            if not is_placeholder(m.group(0)):
                yield SecretHit(kind, m.start(), m.group(0))
    if "PRIVATE KEY" in present:
        for m in _PRIVATE_KEY.finditer(text):
            body = re.sub(r"\s", "", m.group(1))
            if len(body) >= 60 and not is_placeholder(body):
                yield SecretHit("private_key", m.start(), m.group(0))
    if "PuTTY-User-Key-File" in present:
        for m in _PUTTY_KEY.finditer(text):
            yield SecretHit("private_key", m.start(), m.group(0))
    if "eyJ" in present:
        for m in _matches_at(_JWT, text, scanner.positions("eyJ")):
            if _jwt_header_ok(m.group(1)) and not _jwt_is_example(m.group(2)):
                yield SecretHit("jwt", m.start(), m.group(0))
    for a, b in scanner.windows(("://",), 40, 300):
        for m in _CONN.finditer(text, a, b):
            user, password = m.group(1), m.group(2)
            if (
                password.lower() in _DUMMY_PASSWORDS
                or password == user
                or is_placeholder(password)
                or any(w in user.lower() for w in ("your", "<", "{", "$", "user:"))
                or password.startswith(("{", "$", "%", "<", "[", ":"))
            ):
                continue
            yield SecretHit("connection_string_password", m.start(2), password)
    for m in _assignments(text):
        value = m.group(1) or m.group(2)
        if value and _looks_random(value):
            yield SecretHit("secret_assignment", m.start(), value)
    if "earer" in present:
        # "authorization: " may come before the anchor; a token is short.
        for m in scanner.search(_BEARER, ("earer",), 200, 1000):
            # A JWT is judged by the JWT rule (which knows jwt.io's sample).
            if not m.group(1).startswith("eyJ") and _looks_random(m.group(1)):
                yield SecretHit("bearer_token", m.start(), m.group(1))
