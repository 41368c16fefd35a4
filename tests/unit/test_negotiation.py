"""Which Accept header gets a page's markdown instead of its HTML
(serve_app/web/content.py): text/markdown preferred by q, or by order at an
equal q; a browser's Accept never."""

from __future__ import annotations

import pytest

from serve_app.web.content import wants_markdown


@pytest.mark.parametrize(
    ("accept", "markdown"),
    [
        ("text/markdown", True),
        ("text/markdown; charset=utf-8", True),
        ("text/markdown, text/html;q=0.9", True),
        ("text/html, text/markdown", False),
        ("text/markdown, text/html", True),
        ("text/markdown;q=0.1, text/html", False),
        ("text/html,application/xhtml+xml,*/*;q=0.8", False),
        ("*/*", False),
        ("", False),
        ("text/markdown;q=0", False),
    ],
)
def test_which_accept_gets_markdown(accept: str, markdown: bool) -> None:
    assert wants_markdown(accept) is markdown
