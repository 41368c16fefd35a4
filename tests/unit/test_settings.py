"""Configuration parsing."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from serve_app.settings import Settings, load_or_create_secret, parse_rate


def test_parse_rate() -> None:
    assert parse_rate("10/hour") == (10, 3600)
    assert parse_rate("60/minute") == (60, 60)
    assert parse_rate("5/30s") == (5, 30)
    assert parse_rate(" 2 / day ") == (2, 86400)
    for bad in ("ten/hour", "10/fortnight", "0/hour", "10"):
        with pytest.raises(ValueError):
            parse_rate(bad)


def test_defaults_follow_the_spec_table() -> None:
    rules = Settings().rules()
    table = {name: (r.limit, r.window_s) for name, r in rules.items()}
    assert table == {
        "registration": (10, 3600),
        "pattern_create": (5, 3600),
        "question_create": (5, 3600),
        "answer_create": (10, 3600),
        "comment": (30, 3600),
        "vote": (100, 3600),
        "search": (60, 60),
        "general": (1000, 3600),
        "login": (30, 3600),  # ours: the spec has no sign-in (docs/decisions/resources.md)
        "claim": (20, 3600),  # ours: claims and re-links per human (each may ask X)
        # ours: issue 24 (docs/decisions/uploads-and-exposure.md, "Security: uploads…")
        "upload": (30, 3600),
        # ours: anonymous reads per IP (docs/decisions/rate-limits.md,
        # "Security: read costs")
        "anon_read": (300, 60),
        "health": (120, 60),  # ours: anonymous /api/health per IP (issue 30)
        # ours: verifications per agent and per client address (issue 33,
        # docs/decisions/trust.md)
        "verify": (30, 3600),
        "verify_address": (60, 3600),
        # ours: diffs of revisions per IP (issue 45, docs/security.md H1)
        "revision_diff": (30, 60),
        # ours: OAuth client registrations and uncached client-metadata
        # fetches per IP (issue 45, docs/security.md M2, M3)
        "oauth_register": (100, 3600),
        "oauth_client_fetch": (30, 3600),
    }


def test_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_RATELIMIT_VOTE", "7/minute")
    monkeypatch.setenv("CAIRN_TRUSTED_PROXIES", "10.0.0.0/8, 192.168.1.1")
    monkeypatch.setenv("CAIRN_PORT", "9000")
    settings = Settings()
    assert settings.rules()["vote"].limit == 7
    assert [str(n) for n in settings.trusted_networks()] == ["10.0.0.0/8", "192.168.1.1/32"]
    assert settings.base_url == "http://127.0.0.1:9000"


def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_TRUSTED_PROXIES", "not-a-cidr")
    with pytest.raises(ValidationError):
        Settings()
    monkeypatch.delenv("CAIRN_TRUSTED_PROXIES")
    monkeypatch.setenv("CAIRN_RATELIMIT_SEARCH", "lots")
    with pytest.raises(ValidationError):
        Settings()


def test_public_base_url() -> None:
    assert Settings(public_base_url="https://cairn.dev/").base_url == "https://cairn.dev"
    assert Settings(host="0.0.0.0", port=8080).base_url == "http://127.0.0.1:8080"


def test_secret_is_generated_once_with_private_mode(tmp_path: Path) -> None:
    first = load_or_create_secret(tmp_path)
    assert len(first) >= 40
    assert load_or_create_secret(tmp_path) == first
    mode = stat.S_IMODE((tmp_path / "secret_key").stat().st_mode)
    assert mode == 0o600
    assert Settings(state_dir=tmp_path).secret_bytes() == first.encode()
    assert Settings(state_dir=tmp_path, secret_key="explicit").secret_bytes() == b"explicit"


def test_replicas_get_resolved_and_overridden_values(monkeypatch: pytest.MonkeyPatch) -> None:
    from serve_app.launch.bootstrap import Prepared, worker_env

    monkeypatch.setenv("CAIRN_RATELIMIT_VOTE", "7/minute")
    monkeypatch.setenv("CAIRN_PORT", "8000")
    settings = Settings().model_copy(update={"port": 8102})  # as `cairn run --port 8102`
    env = worker_env(settings, Prepared("postgresql://db/cairn", "s3cret", embedded=True))
    assert env["CAIRN_PORT"] == "8102"
    assert env["CAIRN_DATABASE_URL"] == "postgresql://db/cairn"
    assert env["CAIRN_SECRET_KEY"] == "s3cret"
    assert env["CAIRN_RATELIMIT_VOTE"] == "7/minute"
    assert Path(env["CAIRN_STATE_DIR"]).is_absolute()


def test_hnsw_build_settings_reach_the_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """CAIRN_SEARCH_HNSW_M and _EF_CONSTRUCTION build the VectorIndex's graph
    and the replicas' 8-bit copies (recall at a million depends on them)."""
    from dataclasses import replace

    from embeddings.faiss_index import _GraphState

    monkeypatch.setenv("CAIRN_SEARCH_HNSW_M", "24")
    monkeypatch.setenv("CAIRN_SEARCH_HNSW_EF_CONSTRUCTION", "160")
    config = Settings().indexer_config("postgresql://x/y").index
    assert (config.hnsw_m, config.hnsw_ef_construction) == (24, 160)
    for codes in ("float", "sq8"):
        graph = _GraphState.new_graph(8, replace(config, hnsw_codes=codes))
        assert graph.hnsw.efConstruction == 160
        assert graph.hnsw.nb_neighbors(1) == 24
    monkeypatch.setenv("CAIRN_SEARCH_HNSW_NODES_PER_EF", "250")
    assert Settings().indexer_config("postgresql://x/y").index.hnsw_nodes_per_ef == 250
    monkeypatch.setenv("CAIRN_SEARCH_HNSW_EF_CONSTRUCTION", "2")
    with pytest.raises(ValidationError):
        Settings()


def test_the_model_cache_can_be_shared_by_state_folders(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from embeddings.onnx_model import default_cache

    monkeypatch.delenv("CAIRN_MODEL_CACHE_DIR", raising=False)
    monkeypatch.setenv("CAIRN_STATE_DIR", str(tmp_path / "a"))
    assert Settings().embedder_config().cache_dir == str(tmp_path / "a" / "models")
    assert default_cache() == tmp_path / "a" / "models"
    monkeypatch.setenv("CAIRN_MODEL_CACHE_DIR", str(tmp_path / "shared"))
    for state in ("a", "b"):
        monkeypatch.setenv("CAIRN_STATE_DIR", str(tmp_path / state))
        settings = Settings()
        assert settings.model_cache_path == tmp_path / "shared"
        assert settings.embedder_config().cache_dir == str(tmp_path / "shared")
    assert default_cache() == tmp_path / "shared"
