"""Author markdown as safe HTML, for the web pages: the one place author text
becomes markup (docs/decisions/web.md, "Markdown, safely").

Three locks, each enough on its own against script:

1. markdown-it-py in CommonMark mode with raw HTML off: a ``<script>`` in a
   body is text, and links pass markdown-it's own URL check (no
   ``javascript:``, ``vbscript:``, ``file:`` or ``data:``).
2. Images only from Cairn's own ``/uploads/``; any other image becomes a link
   to it (an outside image would tell its host who reads the page, and the
   pages' CSP would block it anyway).
3. nh3 (Ammonia) cleans the result against an allowlist of tags, attributes,
   classes and URL schemes, and sets ``rel="nofollow ugc noopener"`` on links.

Code (fenced blocks and a pattern's code examples) is highlighted by Pygments
with CSS classes only (``static/pygments.css``): the CSP forbids inline styles.

Renders are kept by their input (``RenderCache``): the output is a pure
function of the text, and a page shows the same texts on every read.
"""

from __future__ import annotations

import html
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import nh3
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound

LINK_REL = "nofollow ugc noopener"
UPLOADS = "/uploads/"
# Past this, code is shown plain: highlighting is linear in practice, but a
# page should not spend its time budget on one huge block.
HIGHLIGHT_MAX_CHARS = 100_000
# How many levels author headings move down (h1 -> h3).
HEADING_OFFSET = 2
# The CSS class of a highlighted block; static/pygments.css is written for it.
CODE_CLASS = "highlight"

_TAGS = {
    "p", "br", "hr", "em", "strong", "code", "pre", "blockquote", "ul", "ol", "li",
    "h1", "h2", "h3", "h4", "h5", "h6", "a", "img", "span", "div",
}  # fmt: skip
_ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title"},
    "ol": {"start"},
}
# Pygments' token classes ("k", "nf", "s2", …) on spans; the block's class on
# its div. Nothing else carries a class.
_CLASSES = {
    "span": {c for c in STANDARD_TYPES.values() if c},
    "div": {CODE_CLASS},
}
_FORMATTER = HtmlFormatter(nowrap=True)
# A code block scrolls sideways in its own box (a long line never widens the
# page), and a box that scrolls must be reachable by keyboard (WCAG 2.1.1;
# axe's scrollable-region-focusable): its <pre> is a tab stop, as GitHub's
# are. Added after the allowlist, which keeps no tabindex: the attribute is
# Cairn's constant, never an author's.
_BLOCK = f'<div class="{CODE_CLASS}"><pre>'
_FOCUSABLE_BLOCK = f'<div class="{CODE_CLASS}"><pre tabindex="0">'


def uploaded(url: str) -> bool:
    """An image URL on Cairn's own uploads: a path under /uploads/, no host,
    no scheme, no way out of the folder."""
    return (
        url.startswith(UPLOADS)
        and "\\" not in url
        and "/../" not in url
        and not url.startswith("//")
        and all(ch.isprintable() and not ch.isspace() for ch in url)
    )


def _only_uploads(tag: str, attribute: str, value: str) -> str | None:
    if tag == "img" and attribute == "src" and not uploaded(value):
        return None
    return value


@lru_cache(maxsize=1)
def _cleaner() -> nh3.Cleaner:
    return nh3.Cleaner(
        tags=_TAGS,
        clean_content_tags={"script", "style"},
        attributes=_ATTRIBUTES,
        attribute_filter=_only_uploads,
        link_rel=LINK_REL,
        url_schemes={"http", "https", "mailto"},
        allowed_classes=_CLASSES,
        strip_comments=True,
    )


def clean(markup: str) -> str:
    """``markup`` through the allowlist: what may reach a page."""
    return _cleaner().clean(markup)


def _lexer(language: str | None) -> Any:
    name = (language or "").strip().split(maxsplit=1)[0] if (language or "").strip() else ""
    if name:
        try:
            return get_lexer_by_name(name.lower())
        except ClassNotFound:
            pass
    return TextLexer()


def _code_block(code: str, language: str | None) -> str:
    """A highlighted block (unsanitised: ``clean`` runs after)."""
    if len(code) > HIGHLIGHT_MAX_CHARS:
        inner = html.escape(code, quote=False)
    else:
        inner = pygments_highlight(code, _lexer(language), _FORMATTER)
    return f'<div class="{CODE_CLASS}"><pre><code>{inner}</code></pre></div>\n'


class RenderCache:
    """Renders by their input, least recently used dropped first, within
    ``budget`` characters of input and output together. An input larger than
    ``item_max`` is rendered every time, so one huge text never empties it."""

    def __init__(self, budget: int, item_max: int) -> None:
        self.budget, self.item_max = budget, item_max
        self.size = self.hits = self.misses = 0
        self._items: OrderedDict[tuple[str, ...], str] = OrderedDict()
        self._lock = threading.Lock()  # pages may render in worker threads too

    def get(self, key: tuple[str, ...], render: Callable[[], str]) -> str:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return found
            self.misses += 1
        out = render()
        given = sum(map(len, key))
        if given > self.item_max:
            return out
        cost = given + len(out)
        with self._lock:
            if key not in self._items:
                self._items[key] = out
                self.size += cost
            while self.size > self.budget and self._items:
                old_key, old = self._items.popitem(last=False)
                self.size -= sum(map(len, old_key)) + len(old)
        return out

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.size = 0


# Rendering costs milliseconds a text (markdown-it, Pygments, nh3): a question
# page of 30 answers spent most of its time there (docs/benchmarks.md, "Web
# pages: server time"). 16 M characters of input and output: tens of MiB per
# process at most; a text over 64 K characters is rendered each time.
RENDERS = RenderCache(budget=16_000_000, item_max=64_000)


def _focusable(markup: str) -> str:
    return markup.replace(_BLOCK, _FOCUSABLE_BLOCK)


def code(source: str | None, language: str | None = None) -> str:
    """Code (a pattern's code example) as a highlighted, sanitised block."""
    text, lang = source or "", language or ""
    return RENDERS.get(("code", text, lang), lambda: _focusable(clean(_code_block(text, language))))


def _fence(
    self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    token = tokens[idx]
    return _code_block(token.content, token.info)


def _code_indented(
    self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    return _code_block(tokens[idx].content, None)


def _heading(
    self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    # Author headings sit under the page's own h1 and h2 sections: "# Title"
    # in a body is an h3, and so on down to h6, so the page's outline (what a
    # screen reader lists) stays the page's.
    token = tokens[idx]
    level = min(int(token.tag[1]) + HEADING_OFFSET, 6)
    return f"<h{level}>" if token.nesting == 1 else f"</h{level}>\n"


def _image(
    self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = self.renderInlineAsText(token.children or [], options, env)
    if uploaded(src):
        return f'<img src="{html.escape(src)}" alt="{html.escape(alt)}">'
    # Not ours: a link to it, never a fetch from the reader's browser.
    return f'<a href="{html.escape(src)}">{html.escape(alt or src)}</a>'


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.add_render_rule("fence", _fence)
    md.add_render_rule("code_block", _code_indented)
    md.add_render_rule("image", _image)
    md.add_render_rule("heading_open", _heading)
    md.add_render_rule("heading_close", _heading)
    return md


def markdown(text: str | None) -> str:
    """Author markdown as sanitised HTML, ready for a page."""
    source = text or ""
    return RENDERS.get(("md", source), lambda: _focusable(clean(_parser().render(source))))


# Where one block of text ends and the next begins, once tags are gone.
_BLOCK_START = re.compile(r"<(?=/?(?:p|li|h[1-6]|pre|div|br|hr|blockquote|ul|ol)\b)")


def plain(text: str | None, limit: int) -> str:
    """Author markdown as plain text (no markup, entities decoded), cut at a
    word to at most ``limit`` characters: a page's description for link
    previews. Escape it where it is written."""
    rendered = _BLOCK_START.sub(" <", _parser().render(text or ""))
    flat = " ".join(html.unescape(nh3.clean(rendered, tags=set())).split())
    if len(flat) > limit:
        flat = flat[: limit - 1].rsplit(" ", 1)[0] + "…"
    return flat


def stylesheet() -> str:
    """The CSS for highlighted code (static/pygments.css holds this text)."""
    return (
        "/* Written by serve_app.kit.render.stylesheet() (Pygments' default style). */\n"
        + HtmlFormatter().get_style_defs(f".{CODE_CLASS}")
        + "\n"
    )
