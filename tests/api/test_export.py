"""The public export (docs/decisions/events.md, "Export"): what the anonymous
public API shows, as gzipped JSONL per kind with a manifest and a licence; no
private column's value in any exported byte; the feed continues from the
manifest's cursor."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI
from sqlmodel import SQLModel

import storage.models  # noqa: F401 - every table registered on the metadata
from serve_app.kit.licensing import CONTENT_LICENSE, CONTENT_LICENSE_URL
from serve_app.services import export
from storage.db import make_engine, make_sessionmaker
from storage.models.oauth import OAuthClient, OAuthGrant, OAuthToken
from tests.api.conftest import SECRET, assert_error, register, sign_up
from tests.api.test_changes import everything
from tests.api.test_comments import comment
from tests.api.test_moderation_decisions import decide, staff
from tests.api.test_patterns import publish
from tests.api.test_questions import answer, ask
from tests.api.test_verifications import verify

# Each exported kind and the table its rows come from (the others are not exported).
TABLE_OF = {
    "agents": "agents",
    "categories": "categories",
    "patterns": "patterns",
    "revisions": "revisions",
    "questions": "questions",
    "answers": "answers",
    "comments": "comments",
    "verifications": "verifications",
}


async def run_export(database: str, out: Path, *, replace: bool = False) -> dict[str, Any]:
    engine = make_engine(database, pool_size=1, max_overflow=0)
    try:
        async with make_sessionmaker(engine)() as session:
            return await export.write(session, SECRET, out, replace=replace)
    finally:
        await engine.dispose()


def same(shown: dict[str, Any], exported: dict[str, Any]) -> bool:
    """Equal, timestamps compared as instants (Postgres writes the export's
    JSON, as the change feed's items, without trailing zeros)."""
    at = {k for k in exported if k.endswith("_at")}
    return {k: v for k, v in shown.items() if k not in at} == {
        k: v for k, v in exported.items() if k not in at
    } and all(datetime.fromisoformat(shown[k]) == datetime.fromisoformat(exported[k]) for k in at)


def rows(out: Path, kind: str) -> list[dict[str, Any]]:
    with gzip.open(out / f"{kind}.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


async def small_corpus(client: httpx.AsyncClient, database: str) -> dict[str, Any]:
    author, helper = await register(client, "Author"), await register(client, "Helper")
    mod = await staff(client, database)
    pattern = await publish(client, author)
    edited = await client.put(
        f"/api/patterns/{pattern['id']}", headers=author.auth, json={"title": "Retry it well"}
    )
    assert edited.status_code == 200, edited.text
    await comment(client, helper, pattern["id"])
    assert (await verify(client, helper, f"/api/patterns/{pattern['id']}")).status_code == 201
    q = await ask(client, author)
    a = await answer(client, helper, q["slug"])
    rejected = await publish(client, author, title="Rejected secret pattern zq7")
    await decide(client, mod, pattern_id=rejected["id"], action="reject", notes="Spam zq7 note.")
    gone = await ask(client, helper, title="A question about to be deleted zq8")
    assert (
        await client.delete(f"/api/questions/{gone['slug']}", headers=helper.auth)
    ).status_code in (
        200,
        204,
    )
    return {"pattern": pattern, "question": q, "answer": a, "author": author, "helper": helper}


async def test_the_export_is_the_public_api_and_the_feed_continues_it(
    client: httpx.AsyncClient, database: str, tmp_path: Path
) -> None:
    corpus = await small_corpus(client, database)
    out = tmp_path / "dump"
    manifest = await run_export(database, out)

    # The files, their counts and hashes as the manifest says; the licence.
    assert sorted(p.name for p in out.iterdir()) == sorted(export.FILES)
    assert json.loads((out / "manifest.json").read_text()) == manifest
    for name, info in manifest["files"].items():
        data = (out / name).read_bytes()
        assert info["sha256"] == hashlib.sha256(data).hexdigest()
        assert info["bytes"] == len(data)
        if info["count"] is not None:
            assert len(rows(out, info["kind"])) == info["count"] == manifest["counts"][info["kind"]]
    assert manifest["license"]["name"] == CONTENT_LICENSE
    assert manifest["license"]["url"] == CONTENT_LICENSE_URL
    assert CONTENT_LICENSE_URL in (out / "LICENSE").read_text()
    assert manifest["format_version"] == export.FORMAT_VERSION

    # Content: what the feed (the public view, through storage/access.py) shows now.
    changes = await everything(client)
    assert changes[-1]["cursor"] == manifest["cursor"]
    public: dict[tuple[str, str], Any] = {}
    for change in changes:
        public[(change["kind"], change["id"])] = change["item"]
    for kind in ("pattern", "question", "answer", "comment", "verification"):
        exported = {row.pop("id"): row for row in rows(out, kind + "s")}
        shown = {i: item for (k, i), item in public.items() if k == kind and item is not None}
        assert exported == shown, kind

    # And what the public API lists: the patterns, questions, categories, profiles.
    listed = (await client.get("/api/patterns?limit=50")).json()["data"]
    assert {p["id"] for p in listed} == {p["id"] for p in rows(out, "patterns")}
    assert rows(out, "patterns")[0]["title"] == "Retry it well"
    asked = (await client.get("/api/questions?limit=50")).json()["data"]
    assert {q["id"] for q in asked} == {q["id"] for q in rows(out, "questions")}
    categories = (await client.get("/api/categories")).json()["data"]
    assert [{k: c[k] for k in rows(out, "categories")[0]} for c in categories] == rows(
        out, "categories"
    )
    for agent in rows(out, "agents"):
        profile = (await client.get(f"/api/agents/{agent['username']}")).json()["data"]
        assert same({k: profile[k] for k in agent}, agent)
    revisions = rows(out, "revisions")
    assert sorted(r["number"] for r in revisions if r["pattern_id"] == corpus["pattern"]["id"]) == [
        1,
        2,
    ]
    for revision in revisions:
        if revision["pattern_id"]:
            shown_rev = await client.get(
                f"/api/patterns/{revision['pattern_id']}/revisions/{revision['number']}"
            )
            assert shown_rev.json()["data"]["fields"] == revision["fields"]

    # Continuing from the manifest's cursor gives exactly what changed since.
    later = await answer(client, corpus["author"], corpus["question"]["slug"], body="Later one.")
    after = await everything(client, f"&after={manifest['cursor']}")
    assert [(c["kind"], c["id"], c["change"]) for c in after] == [
        ("answer", later["id"], "created")
    ]


async def seed_oauth(database: str, human_id: str, owner_id: str) -> None:
    """An OAuth client, grant and access token of a human for a bot (what the
    OAuth flow stores; tests/api/test_oauth.py walks the flow itself)."""
    now = datetime.now(UTC)
    engine = make_engine(database, pool_size=1, max_overflow=0)
    try:
        async with make_sessionmaker(engine)() as session:
            session.add(
                OAuthClient(
                    client_id="https://client.example/zq11-client-metadata",
                    kind="metadata",
                    info={"client_name": "Private zq11 client", "redirect_uris": []},
                    secret_hash=os.urandom(32),
                )
            )
            await session.flush()
            grant = OAuthGrant(
                human_id=uuid.UUID(human_id),
                bot_id=uuid.UUID(owner_id),
                client_id="https://client.example/zq11-client-metadata",
                scopes=["read"],
            )
            session.add(grant)
            await session.flush()
            session.add(
                OAuthToken(
                    token_hash=os.urandom(32),
                    kind="access",
                    grant_id=grant.id,
                    family_id=uuid.uuid4(),
                    scopes=["read"],
                    resource="https://cairn.example/mcp",
                    expires_at=now + timedelta(hours=1),
                )
            )
            await session.commit()
    finally:
        await engine.dispose()


def split_values(database: str, exported_ids: set[str]) -> tuple[dict[str, set[str]], set[str]]:
    """Every value in the database, derived from the models: by
    ``table.column`` those that are private (every column not exported, and
    every column of a row not exported: hidden, deleted, private), and the
    set of public ones (the exported columns of the exported rows). A private
    column added later is scanned without a change here."""
    kinds = {table: kind for kind, table in TABLE_OF.items()}
    private: dict[str, set[str]] = {}
    public: set[str] = set()
    with psycopg.connect(database.replace("postgresql+psycopg://", "postgresql://")) as conn:
        for table in SQLModel.metadata.sorted_tables:
            public_columns = set(EXPORTED_FIELDS.get(kinds.get(table.name, ""), ()))
            names = ", ".join(f'"{c.name}"' for c in table.columns)
            for record in conn.execute(f'SELECT {names} FROM "{table.name}"'):
                row = dict(zip([c.name for c in table.columns], record, strict=True))
                row_public = table.name in kinds and str(row.get("id")) in exported_ids
                for column, value in row.items():
                    texts = flatten(value)
                    if row_public and column in public_columns:
                        public.update(texts)
                    else:
                        private.setdefault(f"{table.name}.{column}", set()).update(texts)
    return private, public


def strings(value: Any) -> list[str]:
    """The string values in an exported row (not its keys)."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in strings(v)]
    if isinstance(value, list):
        return [t for v in value for t in strings(v)]
    return [value] if isinstance(value, str) else []


def flatten(value: Any) -> list[str]:
    if value is None or isinstance(value, bool | int | float):
        return []
    if isinstance(value, bytes | memoryview):
        raw = bytes(value)
        return [raw.hex(), raw.decode("latin-1")] if len(raw) >= 8 else []
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in [str(k), *flatten(v)]]
    if isinstance(value, list | tuple):
        return [t for v in value for t in flatten(v)]
    return [str(value)]


EXPORTED_FIELDS: dict[str, list[str]] = {}


async def test_no_private_data_leaves(
    client: httpx.AsyncClient, database: str, tmp_path: Path
) -> None:
    await small_corpus(client, database)
    human = await sign_up(client, "Grace Operator")
    await seed_oauth(database, human.agent_id, owner_id=(await register(client, "Bot")).agent_id)
    owner = await register(client, "Collector")
    created = await client.post(
        "/api/collections",
        headers=owner.auth,
        json={"name": "Private list zq9", "description": "Secret zq9 notes", "is_public": False},
    )
    assert created.status_code == 201, created.text
    out = tmp_path / "dump"
    await run_export(database, out)
    blob = "\n".join(
        gzip.decompress((out / f"{kind}.jsonl.gz").read_bytes()).decode() for kind in export.KINDS
    )
    blob += (out / "manifest.json").read_text() + (out / "LICENSE").read_text()
    exported: dict[str, list[dict[str, Any]]] = {k: rows(out, k) for k in export.KINDS}
    for kind in TABLE_OF:
        EXPORTED_FIELDS[kind] = sorted({f for row in exported[kind] for f in row})
    # What is public, as the public API says it (not as the export does): the
    # change feed's live items, the profiles that answer, their revisions.
    shown = {c["id"] for c in await everything(client) if c["item"] is not None}
    for agent in exported["agents"]:
        assert (await client.get(f"/api/agents/{agent['username']}")).status_code == 200
        shown.add(agent["id"])
    shown |= {c["id"] for c in exported["categories"]}
    shown |= {
        r["id"] for r in exported["revisions"] if (r["pattern_id"] or r["answer_id"]) in shown
    }
    exported_ids = {str(row["id"]) for kind in TABLE_OF for row in exported[kind]}
    assert exported_ids <= shown
    scanned, public = split_values(database, shown)
    # The tags are counted from public columns.
    public.update(t for row in exported["tags"] for t in strings(row))
    exported_strings = {t for kind in export.KINDS for row in exported[kind] for t in strings(row)}

    # The private data this test seeded is among what is scanned.
    for column in (
        "agents.email",
        "agents.password_hash",
        "api_keys.key_hash",
        "agents.claim_code",
        "human_sessions.token_hash",
        "moderation_decisions.notes",
        "oauth_tokens.token_hash",
        "oauth_clients.secret_hash",
    ):
        assert scanned.get(column), column
    assert "Private list zq9" in scanned["collections.name"]
    assert "Rejected secret pattern zq7" in scanned["patterns.title"]
    # A private value leaks if it is an exported value, or (long enough not to
    # be a common word or an enum) anywhere in an exported byte.
    leaks = [
        (column, text)
        for column, texts in scanned.items()
        for text in texts - public
        if text in exported_strings or (len(text) >= 16 and text in blob)
    ]
    assert sorted(leaks) == [], "\n".join(map(repr, sorted(leaks)))


def test_an_unwritable_or_used_folder_is_a_clear_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("x")
    for out, words in (
        (locked / "dump", "cannot write in"),
        (used, "is not an empty folder"),
        (tmp_path / "no" / "dump", "is not a folder"),
    ):
        if words == "cannot write in" and os.geteuid() == 0:
            continue  # root writes anywhere
        with pytest.raises(export.ExportError, match=words):
            export.prepare_target(out)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_cli_exports(database: str, tmp_path: Path) -> None:
    env = {**os.environ, "CAIRN_DATABASE_URL": database, "CAIRN_STATE_DIR": str(tmp_path / "s")}
    out = tmp_path / "cli-dump"
    done = subprocess.run(
        [sys.executable, "-m", "serve_app.launch.cli", "export", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "cairn export: patterns:" in done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert json.loads(done.stdout)["cursor"] == manifest["cursor"]


async def test_the_published_export_is_downloadable(
    app: FastAPI,
    client: httpx.AsyncClient,
    database: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = app.state.ctx
    # Published into a folder of its own (CAIRN_EXPORT_DIR: on a cluster, one
    # every node mounts), which the API reads.
    shared = tmp_path / "mnt" / "cairn-export"
    changed = {"state_dir": tmp_path / "state", "export_dir": shared}
    monkeypatch.setattr(ctx, "settings", ctx.settings.model_copy(update=changed))
    assert_error(await client.get("/api/export/latest"), 404, "export_not_found")
    assert_error(await client.get("/api/export/latest/patterns.jsonl.gz"), 404, "export_not_found")

    author = await register(client, "Author")
    await publish(client, author)
    target = export.published_path(ctx.settings.export_path)
    assert target == shared / "latest"
    first = await run_export(database, target, replace=True)
    await ask(client, author)
    # A second publication replaces the first whole.
    manifest = await run_export(database, target, replace=True)
    assert manifest["position"] > first["position"]
    assert [p.name for p in target.parent.iterdir()] == ["latest"]

    shown = await client.get("/api/export/latest")
    assert shown.status_code == 200, shown.text
    body = shown.json()
    assert body["cursor"] == manifest["cursor"] and body["counts"]["questions"] == 1
    for name, info in body["files"].items():
        assert info["url"] == f"/api/export/latest/{name}"
        got = await client.get(info["url"])
        assert got.status_code == 200, got.text
        assert hashlib.sha256(got.content).hexdigest() == info["sha256"]
        assert got.headers["etag"] == f'"{info["sha256"]}"'
    again = await client.get(
        "/api/export/latest/questions.jsonl.gz",
        headers={"If-None-Match": f'"{manifest["files"]["questions.jsonl.gz"]["sha256"]}"'},
    )
    assert again.status_code == 304
    for name in ("secret_key", "..%2Fsecret_key", "nope.jsonl.gz"):
        assert_error(await client.get(f"/api/export/latest/{name}"), 404)
