"""Verification posts on X: checking and rebuilding a post URL, reading the
post's author and text from X's oEmbed endpoint."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from html.parser import HTMLParser
from typing import Any

from serve_app.kit.outbound import OutboundError, call_json

# https://x.com/<handle>/status/<id> (twitter.com, www. and mobile. too; a share
# query or fragment is dropped). Anything else never leaves this process.
_POST_URL = re.compile(
    r"^https://(?:www\.|mobile\.)?(?:x|twitter)\.com/([A-Za-z0-9_]{1,15})/status(?:es)?/"
    r"([0-9]{1,20})/?(?:[?#][^\s]*)?$"
)
_AUTHOR_URL = re.compile(r"^https?://(?:www\.)?(?:x|twitter)\.com/([A-Za-z0-9_]{1,15})/?$")


class PostUnavailable(Exception):
    """The embed endpoint says the post does not exist or is not public."""


class EmbedError(Exception):
    """The embed endpoint could not be reached or answered nonsense."""


# X post ids are "snowflakes": the top 41 bits are milliseconds since this epoch.
SNOWFLAKE_EPOCH_MS = 1_288_834_974_657


@dataclass(frozen=True)
class Post:
    url: str
    author_handle: str
    text: str

    @property
    def post_id(self) -> str:
        return self.url.rsplit("/", 1)[1]

    @property
    def posted_at(self) -> datetime:
        """When X made the post, read from its id (no clock of ours involved)."""
        return snowflake_time(int(self.post_id))


def snowflake_time(post_id: int) -> datetime:
    """The creation time encoded in an X post id (ids older than 2010 decode to
    late 2010 or earlier, which is old enough for every check here)."""
    return datetime.fromtimestamp(((post_id >> 22) + SNOWFLAKE_EPOCH_MS) / 1000, UTC)


def canonical_post_url(raw: str) -> str | None:
    """The post URL rebuilt from its handle and id, or None if it is not one."""
    match = _POST_URL.match(raw.strip())
    if match is None:
        return None
    handle, post_id = match.groups()
    return f"https://twitter.com/{handle}/status/{int(post_id)}"


class _PostText(HTMLParser):
    """The text of the <p> elements of an embed's blockquote (the post body)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "p":
            self.depth += 1
        elif tag == "br" and self.depth:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "p" and self.depth:
            self.depth -= 1
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.parts.append(data)


def post_text(embed_html: str) -> str:
    parser = _PostText()
    parser.feed(embed_html)
    parser.close()
    return "".join(parser.parts).strip()


def parse_embed(url: str, payload: Any) -> Post:
    if not isinstance(payload, dict):
        raise EmbedError("the embed reply is not an object")
    author = _AUTHOR_URL.match(str(payload.get("author_url", "")))
    html = payload.get("html")
    if author is None or not isinstance(html, str):
        raise EmbedError("the embed reply has no author_url or html")
    return Post(url=url, author_handle=author.group(1), text=post_text(html))


def mentions(text: str, word: str) -> bool:
    """Whether ``word`` appears in ``text`` as a whole token (any letter case)."""
    pattern = rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])"
    return re.search(pattern, text, re.IGNORECASE) is not None


async def fetch_post(oembed_url: str, post_url: str, *, timeout_s: float, max_bytes: int) -> Post:
    """The post at ``post_url`` (canonical) as X's oEmbed endpoint describes it."""
    try:
        reply = await call_json(
            "GET",
            oembed_url,
            params={"url": post_url, "omit_script": "true", "dnt": "true"},
            timeout_s=timeout_s,
            max_bytes=max_bytes,
        )
    except OutboundError as exc:
        raise EmbedError(str(exc)) from exc
    if reply.status in (403, 404, 410):
        raise PostUnavailable(post_url)
    if reply.status != 200:
        raise EmbedError(f"the embed endpoint answered {reply.status}")
    return parse_embed(post_url, reply.body)
