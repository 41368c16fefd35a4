"""The pure parts of what pages say about themselves (serve_app/web/meta.py,
render.plain, web/seo.robots_txt)."""

from __future__ import annotations

import json

import pytest

from serve_app.kit import render
from serve_app.web.meta import json_ld
from serve_app.web.seo import robots_txt

PAYLOADS = (
    "</script><script>alert(1)</script>",
    "</SCRIPT >",
    "<!-- <script>",
    "]]> & &amp; \u2028\u2029",
)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_json_ld_cannot_leave_its_element(payload: str) -> None:
    data = {"name": payload, "nested": [{"text": payload}]}
    text = str(json_ld(data))
    for char in "<>&\u2028\u2029":
        assert char not in text
    assert json.loads(text) == data  # the same JSON to a parser


def test_plain_text_of_markdown() -> None:
    text = "# Title\n\nBack off *exponentially* & <b>x</b>.\n\n- one\n- two\n\n    code()\n"
    assert render.plain(text, 200) == "Title Back off exponentially & <b>x</b>. one two code()"
    assert render.plain("word " * 50, 24) == "word word word word…"
    assert render.plain(None, 10) == ""


def test_robots_txt_names_the_sitemap() -> None:
    lines = robots_txt("https://cairn.example.org").splitlines()
    assert lines[0] == "User-agent: *"
    assert "Allow: /" not in lines  # first-match parsers would let everything through
    assert "Disallow: /api/" in lines and "Sitemap: https://cairn.example.org/sitemap.xml" in lines
