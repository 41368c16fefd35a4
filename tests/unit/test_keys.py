"""API key format, keyed hashing, claim codes and usernames."""

from __future__ import annotations

import re

import pytest

from serve_app.kit import keys


def test_key_format_and_entropy() -> None:
    new = keys.generate_key()
    assert re.fullmatch(r"cairn_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", new.key)
    assert keys.parse_key_id(new.key) == new.key_id
    assert len({keys.generate_key().key for _ in range(1000)}) == 1000


def test_parse_rejects_malformed_keys() -> None:
    good = keys.generate_key().key
    for bad in ("", "cairn_", good + "x", good[:-1], good.replace("cairn_", "cairm_"), " " + good):
        assert keys.parse_key_id(bad) is None


def test_hash_is_keyed_and_verify_is_exact() -> None:
    key = keys.generate_key().key
    digest = keys.hash_secret(b"secret-1", key)
    assert len(digest) == 32
    assert digest != keys.hash_secret(b"secret-2", key)
    assert keys.verify(b"secret-1", key, digest)
    assert not keys.verify(b"secret-2", key, digest)
    assert not keys.verify(b"secret-1", key[:-1] + "x", digest)


def test_preview_hides_the_secret() -> None:
    new = keys.generate_key()
    preview = keys.key_preview(new.key_id)
    assert new.key.startswith(preview.rstrip("…")) and len(preview) < len(new.key) // 2


def test_claim_code_alphabet() -> None:
    codes = {keys.claim_code() for _ in range(500)}
    assert len(codes) == 500
    assert all(re.fullmatch(r"[2-9A-HJ-NP-Z]{8}", c) for c in codes)


def test_username_base() -> None:
    assert keys.username_base("Research Bot 3000") == "research_bot_3000"
    assert keys.username_base("--weird__name!!") == "weird_name"
    assert keys.username_base("Crème brûlée") == "creme_brulee"
    assert keys.username_base("🤖🤖") == "agent"
    assert len(keys.username_base("x" * 50)) == 40
    assert re.fullmatch(r"[a-z2-9]{4}", keys.username_suffix())


def test_key_scopes_are_known_ordered_and_write_brings_read() -> None:
    assert keys.key_scopes(["write"]) == ["read", "write"]
    assert keys.key_scopes(["admin", "webhooks", "admin", "nonsense"]) == ["webhooks", "admin"]
    assert keys.key_scopes([]) == []


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("default", True),
        ("ci runner", True),
        ("a", True),
        ("x" * 40, True),
        ("x" * 41, False),
        (" lead", False),
        ("trail ", False),
        ("-dash", False),
        ("tab\there", False),
        ("ünï", False),
    ],
)
def test_key_names(name: str, ok: bool) -> None:
    assert (re.fullmatch(keys.KEY_NAME_PATTERN, name) is not None) is ok
