"""Author markdown as safe HTML (serve_app/kit/render.py): CommonMark, raw
HTML as text, links with rel="nofollow ugc noopener", images only from
/uploads, code highlighted with classes and never a style, and the allowlist
holding whatever reaches it."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from serve_app.kit import render

STATIC = Path(render.__file__).resolve().parents[1] / "web" / "static"


def no_active_content(html: str) -> None:
    """Nothing in ``html`` that can run or load: no script or style element,
    no event handler or style attribute, no script URL."""
    lowered = html.lower()
    assert "<script" not in lowered and "<style" not in lowered, html
    assert re.search(r"<[^>]+\son[a-z]+\s*=", lowered) is None, html
    assert re.search(r"<[^>]+\sstyle\s*=", lowered) is None, html
    for scheme in ("javascript:", "vbscript:", "data:"):
        assert not re.search(rf"<[^>]*(href|src)=\"\s*{scheme}", lowered), html
    assert "<iframe" not in lowered and "<object" not in lowered and "<svg" not in lowered


def test_commonmark() -> None:
    out = render.markdown("# Title\n\nSome *em* and **strong**, `code`.\n\n- one\n- two\n")
    assert out == (
        "<h3>Title</h3>\n<p>Some <em>em</em> and <strong>strong</strong>, <code>code</code>.</p>\n"
        "<ul>\n<li>one</li>\n<li>two</li>\n</ul>\n"
    )
    assert render.markdown(None) == ""
    # Author headings sit under the page's own: h1 -> h3, never past h6.
    assert render.markdown("## Two\n\n##### Five\n") == "<h4>Two</h4>\n<h6>Five</h6>\n"


@pytest.mark.parametrize(
    "raw",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        '<a href="javascript:alert(1)">x</a>',
        "<iframe src=https://evil.example></iframe>",
        "<svg onload=alert(1)>",
        "<style>body{display:none}</style>",
        "<!-- comment --><b onclick=alert(1)>b</b>",
    ],
)
def test_raw_html_is_text(raw: str) -> None:
    for text in (raw, f"para\n\n{raw}\n", f"inline {raw} here"):
        out = render.markdown(text)
        no_active_content(out)
        assert "&lt;" in out, out


@pytest.mark.parametrize(
    "link",
    [
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](vbscript:msgbox(1))",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "<javascript:alert(1)>",
        "[x]: javascript:alert(1)\n\n[x]",
    ],
)
def test_script_links_never_link(link: str) -> None:
    out = render.markdown(link)
    no_active_content(out)
    assert "<a " not in out, out


def test_an_encoded_scheme_is_a_path() -> None:
    # A tab inside the scheme is percent-encoded: a relative link, no script.
    out = render.markdown("[x](java&#x09;script:alert(1))")
    no_active_content(out)
    assert 'href="java%09script:alert(1)"' in out


def test_links_carry_rel() -> None:
    out = render.markdown('[docs](https://example.com/a?b=1&c=2 "The docs") and <https://x.y/>')
    assert out == (
        '<p><a href="https://example.com/a?b=1&amp;c=2" title="The docs" '
        'rel="nofollow ugc noopener">docs</a> and '
        '<a href="https://x.y/" rel="nofollow ugc noopener">https://x.y/</a></p>\n'
    )
    assert 'rel="nofollow ugc noopener"' in render.markdown("[me](mailto:a@b.c)")


def test_images_only_from_uploads() -> None:
    own = render.markdown("![diagram](/uploads/0f/abc.png)")
    assert own == '<p><img src="/uploads/0f/abc.png" alt="diagram"></p>\n'
    for elsewhere in (
        "![a](https://evil.example/track.png)",
        "![a](//evil.example/x.png)",
        "![a](/uploads/../api/agents/me)",
        "![a](/static/x.png)",
        "![a](data:image/png;base64,iVBORw0KGgo=)",
    ):
        out = render.markdown(elsewhere)
        assert "<img" not in out, out
        no_active_content(out)
    # An outside image becomes a link to it.
    assert render.markdown("![a](https://e.example/p.png)") == (
        '<p><a href="https://e.example/p.png" rel="nofollow ugc noopener">a</a></p>\n'
    )


def test_the_allowlist_holds_on_its_own() -> None:
    """What the renderer never writes is still cleaned, should it ever."""
    dirty = (
        '<div class="highlight evil" style="x" onclick="y"><span class="k bad">k</span></div>'
        '<img src="https://evil.example/t.png"><img src="/uploads/a/b.png" onerror="x">'
        '<a href="javascript:x">j</a><a href="https://ok.example" target="_blank">ok</a>'
        "<form><input></form><script>x</script><table><tr><td>t</td></tr></table>"
    )
    assert render.clean(dirty) == (
        '<div class="highlight"><span class="k">k</span></div><img><img src="/uploads/a/b.png">'
        '<a rel="nofollow ugc noopener">j</a>'
        '<a href="https://ok.example" rel="nofollow ugc noopener">ok</a>t'
    )


def test_code_is_highlighted_with_classes() -> None:
    out = render.markdown('```python\nimport os\nprint("<b>")\n```\n')
    assert out.startswith(
        '<div class="highlight"><pre tabindex="0"><code><span class="kn">import</span>'
    )
    assert '<span class="s2">"&lt;b&gt;"</span>' in out
    no_active_content(out)
    # Indented code, an unknown language, a hostile info string: plain, escaped.
    for text in (
        "    x = <b>\n",
        "```nosuchlanguage\nx = <b>\n```\n",
        '```"><script>alert(1)</script>\nx = <b>\n```\n',
    ):
        out = render.markdown(text)
        assert (
            out
            == '<div class="highlight"><pre tabindex="0"><code>x = &lt;b&gt;\n</code></pre></div>\n'
        ), text
    # A pattern's code example, by its language.
    example = render.code("SELECT 1; -- </code><script>", "sql")
    assert '<span class="k">SELECT</span>' in example
    no_active_content(example)
    assert (
        render.code(None)
        == '<div class="highlight"><pre tabindex="0"><code>\n</code></pre></div>\n'
    )
    huge = "x = 1\n" * (render.HIGHLIGHT_MAX_CHARS // 6 + 1)
    assert "<span" not in render.code(huge, "python")


def test_the_stylesheet_is_the_committed_file() -> None:
    assert (STATIC / "pygments.css").read_text() == render.stylesheet()
    assert ".highlight .k " in render.stylesheet()


def test_renders_are_kept_within_their_budget() -> None:
    cache = render.RenderCache(budget=100, item_max=30)
    calls: list[str] = []

    def make(text: str) -> str:
        calls.append(text)
        return text.upper()

    assert cache.get(("md", "abc"), lambda: make("abc")) == "ABC"
    assert cache.get(("md", "abc"), lambda: make("abc")) == "ABC"
    assert calls == ["abc"] and (cache.hits, cache.misses) == (1, 1)
    # Past the budget the least recently used go first; too long an input is never kept.
    for n in range(10):
        key = f"text {n:05d}"
        cache.get(("md", key), functools.partial(make, key))
    assert cache.size <= 100 and ("md", "abc") not in cache._items
    long = "x" * 31
    cache.get(("md", long), lambda: make(long))
    cache.get(("md", long), lambda: make(long))
    assert calls.count(long) == 2
    # The module's cache gives what a fresh render gives.
    text = "# T\n\n```python\nx = 1\n```\n"
    render.RENDERS.clear()
    first = render.markdown(text)
    assert render.markdown(text) is first
    assert first == render.clean(render._parser().render(text)).replace(
        '<div class="highlight"><pre>', '<div class="highlight"><pre tabindex="0">'
    )
    assert render.code("x = 1", None) is render.code("x = 1", "")
