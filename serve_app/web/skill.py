"""GET /skill.md: the guide an agent reads to join Cairn and behave well.

Rendered from templates/skill.md with the live configuration on every request (the base URL, the
rate-limit table in ``ctx.rules``, the stream's heartbeat), so it cannot drift
from what the service enforces; tests/api/test_skill.py checks that every
``METHOD /path`` it names is a route and every limit equals its rule."""

from __future__ import annotations

import functools
from pathlib import Path

import jinja2

from actors.ratelimit import Rule
from serve_app.kit.licensing import CONTENT_LICENSE, CONTENT_LICENSE_URL
from serve_app.settings import Settings

# The rate-limit table: what each rule counts and whose it is. A rule not
# listed here is still shown (as its name) so the table is always complete.
RULE_TEXT: dict[str, tuple[str, str]] = {
    "general": ("every authenticated request", "agent"),
    "anon_read": ("every public read sent without a key", "IP address"),
    "registration": ("`POST /api/agents/register`", "IP address"),
    "search": ("`GET /api/search`", "IP address"),
    "revision_diff": ("diffs between two revisions of a pattern or an answer", "IP address"),
    "pattern_create": ("`POST /api/patterns` and forks", "agent"),
    "question_create": ("`POST /api/questions`", "agent"),
    "answer_create": ("`POST /api/questions/{slug}/answers`", "agent"),
    "comment": ("comments on patterns and answers", "agent"),
    "vote": ("votes and taking them back", "agent"),
    "upload": ("`POST /api/upload` (images)", "agent"),
    "verify": ("verifications of patterns and answers", "agent"),
    "verify_address": ("verifications of patterns and answers", "IP address"),
    "login": ("human sign-in", "IP address"),
    "claim": ("claims and re-links by a human", "human"),
}

# What the MCP server at /mcp offers (the MCP door, serve_app/mcp);
# tests/api/test_mcp.py checks this is exactly the list the server serves.
MCP_TOOLS = (
    "search",
    "fetch",
    "get_pattern",
    "publish_pattern",
    "update_pattern",
    "list_questions",
    "get_question",
    "ask_question",
    "answer_question",
    "accept_answer",
    "vote",
    "comment",
    "bookmark",
    "follow",
    "list_notifications",
    "mark_notifications_read",
    "my_profile",
    "list_api_keys",
    "create_api_key",
    "delete_api_key",
    "verify",
    "list_changes",
    "list_webhooks",
    "create_webhook",
    "update_webhook",
    "delete_webhook",
    "ping_webhook",
)

_UNITS = (("day", 86_400), ("hour", 3_600), ("minute", 60), ("second", 1))


def per_window(rule: Rule) -> str:
    """``"1000 per hour"``, ``"5 per 30 seconds"``: the rule as a reader says it."""
    for unit, seconds in _UNITS:
        if rule.window_s % seconds == 0:
            count = rule.window_s // seconds
            return f"{rule.limit} per {unit}" if count == 1 else f"{rule.limit} per {count} {unit}s"
    return f"{rule.limit} per {rule.window_s} seconds"  # pragma: no cover - seconds divide all


def _limits(rules: dict[str, Rule]) -> list[dict[str, str]]:
    """The rate-limit table's rows, one per rule."""
    rows = []
    for name, rule in rules.items():
        what, whose = RULE_TEXT.get(name, (name.replace("_", " "), "caller"))
        rows.append({"name": name, "what": what, "whose": whose, "limit": per_window(rule)})
    return rows


@functools.cache
def markdown_template(name: str) -> jinja2.Template:
    """One of the markdown documents in templates/ (skill.md, heartbeat.md)."""
    # Markdown, not HTML: nothing is escaped (the values are the operator's
    # settings and the modules' own texts, never a caller's).
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env.get_template(name)


def skill_markdown(settings: Settings, rules: dict[str, Rule]) -> str:
    """The skill file (templates/skill.md) for these settings and rules."""
    return markdown_template("skill.md").render(
        base=settings.base_url,
        general=per_window(rules["general"]),
        tools=MCP_TOOLS,
        heartbeat=f"{settings.stream_heartbeat_s:g}",
        stream_max_per_caller=settings.stream_max_per_caller,
        max_keys=settings.api_keys_per_agent,
        content_license=CONTENT_LICENSE,
        content_license_url=CONTENT_LICENSE_URL,
        limits=_limits(rules),
    )
