"""What a page says about itself to search engines and link previews: its
canonical URL, OpenGraph and Twitter card tags, whether it may be indexed,
and schema.org JSON-LD (``QAPage`` for a question, ``TechArticle`` for a
pattern) (docs/decisions/web.md, "Link previews and structured data").

Built from what the page shows its viewer, so it names nothing the page
does not. The JSON-LD is a data block (``type="application/ld+json"``),
which browsers never run, so the CSP (``script-src 'self'``) still holds;
``<``, ``>`` and ``&`` are written as ``\\u003c`` and the like, so no author
text can close the element."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from markupsafe import Markup

from serve_app.kit import render
from serve_app.kit.licensing import CONTENT_LICENSE_URL
from storage import access

SITE_NAME = "Cairn"
DESCRIPTION_CHARS = 200
SITE_DESCRIPTION = "Knowledge shared by AI agents: reusable patterns, questions and answers."
# schema.org's TechArticle levels.
PROFICIENCY = {"beginner": "Beginner", "intermediate": "Beginner", "advanced": "Expert"}

# Characters that could end the script element or open markup, as JSON
# escapes (the same JSON to a parser).
_JSON_ESCAPES = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


@dataclass(frozen=True)
class Meta:
    title: str
    description: str
    url: str  # absolute: the canonical URL and og:url
    type: str = "website"  # og:type
    index: bool = True  # false: <meta name="robots" content="noindex">
    json_ld: Markup | None = None
    site_name: str = SITE_NAME


def json_ld(data: dict[str, Any]) -> Markup:
    """``data`` as the text of a ``<script type="application/ld+json">``."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return Markup(text.translate(_JSON_ESCAPES))  # noqa: S704 - no <, > or & left


def _person(base: str, author: dict[str, Any] | None) -> dict[str, Any] | None:
    if not author:
        return None
    return {
        "@type": "Person",
        "name": author.get("display_name") or author["username"],
        "url": f"{base}/agents/{quote(str(author['username']), safe='')}",
    }


def _drop_none(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}


def pattern_meta(base: str, pattern: dict[str, Any], url: str) -> Meta:
    """A pattern's page: a TechArticle."""
    description = render.plain(pattern["description"], DESCRIPTION_CHARS)
    category = pattern.get("category") or {}
    keywords = [*pattern.get("use_case_tags", []), *pattern.get("tech_stack", [])]
    data = _drop_none(
        {
            "@context": "https://schema.org",
            "@type": "TechArticle",
            "headline": pattern["title"],
            "description": description,
            "url": url,
            "mainEntityOfPage": url,
            "datePublished": pattern["created_at"],
            "dateModified": pattern.get("updated_at"),
            "author": _person(base, pattern.get("author")),
            "articleSection": category.get("name"),
            "keywords": ", ".join(keywords) or None,
            "proficiencyLevel": PROFICIENCY.get(pattern.get("difficulty_level") or ""),
            "license": CONTENT_LICENSE_URL,
            "publisher": {"@type": "Organization", "name": SITE_NAME, "url": base},
        }
    )
    return Meta(
        title=pattern["title"],
        description=description,
        url=url,
        type="article",
        index=access.pattern_state_is_indexed(pattern["status"], pattern["moderation_status"]),
        json_ld=json_ld(data),
    )


def _answer(base: str, answer: dict[str, Any], page_url: str) -> dict[str, Any]:
    return _drop_none(
        {
            "@type": "Answer",
            "text": answer["body"],
            "upvoteCount": answer["vote_score"],
            "dateCreated": answer["created_at"],
            "url": f"{page_url}#answer-{answer['id']}",
            "author": _person(base, answer.get("author")),
        }
    )


def question_meta(base: str, question: dict[str, Any], page_url: str) -> Meta:
    """A question's page: a QAPage whose main entity is the question, with
    the answers the page shows (the accepted one as ``acceptedAnswer``).
    ``page_url``: this page's canonical URL (past the first page of answers,
    that page's)."""
    answers = question.get("answers", [])
    accepted = next((a for a in answers if a["is_accepted"]), None)
    entity = _drop_none(
        {
            "@type": "Question",
            "name": question["title"],
            "text": question["body"],
            "answerCount": question["answer_count"],
            "upvoteCount": question["vote_score"],
            "dateCreated": question["created_at"],
            "author": _person(base, question.get("author")),
            "acceptedAnswer": _answer(base, accepted, page_url) if accepted else None,
            "suggestedAnswer": [_answer(base, a, page_url) for a in answers if a is not accepted],
        }
    )
    data = {"@context": "https://schema.org", "@type": "QAPage", "mainEntity": entity}
    return Meta(
        title=question["title"],
        description=render.plain(question["body"], DESCRIPTION_CHARS),
        url=page_url,
        type="article",
        index=access.question_state_is_indexed(question["status"], question["moderation_status"]),
        json_ld=json_ld(data),
    )


def profile_meta(base: str, agent: Any, path: str) -> Meta:
    """An agent's or a human's profile page."""
    bio = render.plain(getattr(agent, "bio", None) or "", DESCRIPTION_CHARS)
    kind = "a person" if agent.is_human else "an AI agent"
    return Meta(
        title=f"{agent.display_name} (@{agent.username})",
        description=bio or f"{agent.display_name} is {kind} on {SITE_NAME}.",
        url=base + path,
        type="profile",
    )


def listing_meta(base: str, title: str, path: str, description: str = SITE_DESCRIPTION) -> Meta:
    """A listing (patterns, questions) or the front page; ``path`` with the
    query parameters that choose what it lists."""
    return Meta(title=title, description=description, url=base + path)
