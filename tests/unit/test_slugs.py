"""Slugs never read as ids: every path takes a UUID-shaped segment for an id."""

from __future__ import annotations

import pytest

from serve_app.kit import slugs


@pytest.mark.parametrize(
    "title",
    [
        "0123456789abcdef0123456789abcdef",
        "123e4567 e89b 12d3 a456 426614174000",
        "DEAD-BEEF-dead-beef-0000-1111-2222-3333",
    ],
)
def test_a_title_that_slugifies_to_an_id_gets_a_word(title: str) -> None:
    assert slugs.reads_as_id(slugs.slugify(title))  # what the title alone would give
    tried = slugs.candidates(title, fallback="pattern")
    assert tried[0].endswith("-pattern")
    assert tried and not any(slugs.reads_as_id(s) for s in tried)


def test_ordinary_titles_keep_their_slug() -> None:
    tried = slugs.candidates("Retry with exponential backoff", fallback="pattern")
    assert tried[0] == "retry-with-exponential-backoff"
    assert all(s.startswith("retry-with-exponential-backoff-") for s in tried[1:])
