"""Cairn's configuration: environment variables with the prefix ``CAIRN_``.

One cached :func:`get_settings`; nothing here has side effects at import time.
The README's configuration table documents every field.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import socket
from functools import lru_cache
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from actors.dispatch.mail import parse_smtp_url
from actors.ratelimit import Rule
from embeddings.config import EmbedderConfig, IndexConfig, IndexerConfig
from storage.private_files import create_private, temporary_beside

_PERIODS = {
    "s": 1,
    "second": 1,
    "m": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "d": 86400,
    "day": 86400,
}
_RATE_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*$")


def parse_rate(text: str) -> tuple[int, int]:
    """Parse ``"10/hour"``, ``"60/minute"`` or ``"5/30s"`` into (limit, window seconds)."""
    match = _RATE_RE.match(text.lower())
    if not match or match.group(3) not in _PERIODS:
        raise ValueError(f"invalid rate {text!r}: expected e.g. '10/hour', '60/minute', '5/30s'")
    limit = int(match.group(1))
    window = int(match.group(2) or 1) * _PERIODS[match.group(3)]
    if limit < 1 or window < 1:
        raise ValueError(f"invalid rate {text!r}: limit and window must be positive")
    return limit, window


RateText = Annotated[str, Field(pattern=r"^\s*\d+\s*/\s*\d*\s*[a-zA-Z]+\s*$")]


class Settings(BaseSettings):
    """Every knob of a Cairn deployment."""

    model_config = SettingsConfigDict(env_prefix="CAIRN_", extra="ignore", frozen=True)

    # Storage
    database_url: str | None = None
    state_dir: Path = Path(".cairn")
    db_pool_size: int = Field(default=20, ge=1, le=200)
    db_max_overflow: int = Field(default=0, ge=0, le=200)
    # How long opening a connection waits for a database that is restarting
    # before the request gets a 503 (docs/decisions/storage.md, "Database outages").
    db_connect_wait_s: float = Field(default=5.0, ge=0, le=120)
    # SQLAlchemy's round-trip ping on every checkout, for networks that drop
    # idle connections without a word (a cheaper check runs anyway).
    db_pre_ping: bool = False

    # HTTP
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    public_base_url: str | None = None
    # URLs per sitemap file (/sitemaps/<kind>-<n>.xml): the sitemaps
    # protocol's limit is 50,000 (docs/decisions/web.md, "Sitemaps and robots.txt").
    sitemap_urls_per_file: int = Field(default=50_000, ge=1, le=50_000)
    trusted_proxies: Annotated[list[str], NoDecode] = Field(default_factory=list)
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    # POST /api/upload: the largest image (docs/decisions/uploads-and-exposure.md, "Uploads").
    upload_max_bytes: int = Field(default=5 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    # Stored upload bytes per agent, counted from the uploads table; deleting
    # frees room (docs/decisions/uploads-and-exposure.md, "Security: uploads,
    # exposure and client IP").
    upload_quota_bytes: int = Field(default=100 * 1024 * 1024, ge=1024)
    # Where the images live: "postgres" (every node reads them) or "local"
    # (STATE_DIR/uploads: one machine, or a shared file system; docs/decisions/storage.md,
    # "Uploads in Postgres").
    upload_store: str = Field(default="postgres", pattern="^(postgres|local)$")
    # Image checks (full decodes) at once per replica, and how long an upload
    # waits for one before a 503 with Retry-After.
    upload_decode_concurrency: int = Field(default=2, ge=1, le=64)
    upload_decode_wait_s: float = Field(default=2.0, ge=0, le=60)
    secret_key: SecretStr | None = None
    # Sent as the X-Operator-Token header, it shows /api/health's per-part
    # details (as a moderator's or admin's key does); unset: staff only.
    operator_token: SecretStr | None = None
    # Anonymous /api/health answers from a snapshot at most this old (the
    # parts are asked at most once per this period per replica).
    health_snapshot_s: float = Field(default=1.0, ge=0, le=60)
    # The deepest row a paged listing reaches: page * limit at most this
    # (docs/decisions/rate-limits.md, "Security: read costs").
    max_page_offset: int = Field(default=10_000, ge=100, le=10_000_000)

    # Verified API keys kept in each replica (serve_app/runtime/keycache.py;
    # docs/decisions/admission.md, "Verified API keys kept in the
    # replica (issue 32)"): a kept key answers read requests without a Postgres
    # read for at most this long (0: keep none), and at most this many keys.
    # A revocation, deactivation or role change reaches every replica through
    # Postgres at once; this TTL bounds it should that notice be lost.
    key_cache_ttl_s: float = Field(default=60.0, ge=0, le=3600)
    key_cache_size: int = Field(default=10_000, ge=0, le=10_000_000)
    # Named API keys an agent may hold at once, expired ones included until
    # deleted (docs/decisions/api-keys.md).
    api_keys_per_agent: int = Field(default=10, ge=1, le=100)

    # Serve topology
    ingress_replicas: int = Field(default=2, ge=1, le=64)
    ingress_max_ongoing_requests: int = Field(default=128, ge=1, le=10_000)
    ingress_num_cpus: float = Field(default=0.5, ge=0)
    # At most this many Api replicas on one Ray node (0: no limit). 1 spreads
    # them over the nodes, so losing one node leaves replicas that answer.
    ingress_max_replicas_per_node: int = Field(default=0, ge=0, le=100)
    serve_proxy: str = Field(default="haproxy", pattern="^(haproxy|default)$")
    haproxy_stats_port: int = Field(default=18404, ge=1, le=65535)
    haproxy_metrics_port: int = Field(default=19101, ge=1, le=65535)
    fallback_proxy_port: int = Field(default=18500, ge=1, le=65535)
    access_log: bool = False
    # Cairn's own metrics through Ray's metrics agent (telemetry/metrics.py,
    # docs/operations.md); false records nothing. Gauges (pool, stream slots,
    # index lag, backlog) are sampled every metrics_sample_s.
    metrics: bool = True
    metrics_sample_s: float = Field(default=5.0, gt=0, le=300)
    drain_period_s: float = Field(default=1.0, ge=0)

    # Notifications: follower fan-out and e-mail
    # (docs/decisions/notifications-and-streams.md, "Notifications")
    smtp_url: SecretStr | None = None
    mail_from: str | None = None
    fanout_batch_size: int = Field(default=500, ge=1, le=10_000)
    mail_max_attempts: int = Field(default=8, ge=1, le=50)
    mail_retry_base_s: float = Field(default=30.0, ge=0)
    dispatch_poll_s: float = Field(default=2.0, gt=0, le=3600)
    # The published export (docs/decisions/events.md, "Export"): `cairn run`
    # writes it this often into the state folder, where GET /api/export/latest
    # reads it; 0 turns the periodic export off (`cairn export --publish` still
    # publishes one).
    export_interval_s: float = Field(default=86400.0, ge=0, le=30 * 86400)
    # Where it is published (CAIRN_EXPORT_DIR; default STATE_DIR/export). On a
    # cluster, a folder every node mounts (the API replicas on each node read
    # it; the launcher on the head writes it).
    export_dir: Path | None = None
    notification_retention_days: int = Field(default=30, ge=1, le=3650)
    # The live stream (docs/decisions/notifications-and-streams.md, "Notification
    # stream"): a comment line this often on an idle stream (and a look at the
    # database), well inside every proxy idle timeout on the way (HAProxy's
    # client timeout is 3600 s); how many streams one Api replica holds open (each also holds
    # one of Serve's ongoing-request slots, which the builder adds to
    # CAIRN_INGRESS_MAX_ONGOING_REQUESTS); how long one stream lives before
    # the client is asked to reconnect (its key is checked again then).
    stream_heartbeat_s: float = Field(default=15.0, gt=0, le=600)
    stream_max_per_replica: int = Field(default=1000, ge=1, le=100_000)
    # Long-lived connections (notification streams, MCP streams) one agent
    # may hold open on one replica, and one client address (docs/security.md,
    # "The admission layer").
    stream_max_per_caller: int = Field(default=3, ge=1, le=1000)
    stream_max_per_address: int = Field(default=50, ge=1, le=100_000)
    stream_max_age_s: float = Field(default=900.0, ge=1, le=86_400)
    # At most one notice per (actor, recipient, kind) per this many hours
    # (docs/decisions/claims-and-reputation.md, "Security: reputation and mail").
    notice_throttle_hours: float = Field(default=24.0, gt=0, le=24 * 30)
    # Address verification: how long a mailed link works, and how many
    # verification mails one human, or one address, may get per hour.
    email_verify_ttl_hours: float = Field(default=24.0, gt=0, le=24 * 14)
    email_verify_per_hour: int = Field(default=3, ge=1, le=100)

    # Idempotency-Key on creating POSTs: how long a key replays its first
    # answer (docs/decisions/http-and-contract.md, "Contract: idempotency keys").
    idempotency_ttl_hours: float = Field(default=24.0, gt=0, le=24 * 30)

    # Humans and claiming (docs/decisions/resources.md, "Humans and sign-in", "Claiming")
    session_ttl_days: int = Field(default=30, ge=1, le=365)
    x_oembed_url: str = "https://publish.twitter.com/oembed"
    captcha_verify_url: str | None = None
    captcha_secret: SecretStr | None = None
    captcha_test_token: str = Field(default="cairn-captcha-test", min_length=8)
    relink_code_ttl_minutes: int = Field(default=60, ge=1, le=7 * 24 * 60)
    outbound_timeout_s: float = Field(default=5.0, gt=0, le=60)
    outbound_max_bytes: int = Field(default=262_144, ge=1024, le=16_777_216)

    # Webhooks (docs/decisions/events.md, "Webhooks"): subscriptions an agent
    # may hold, and how deliveries behave toward each endpoint.
    webhooks_per_agent: int = Field(default=10, ge=1, le=100)
    # Tests and local development only: accept http:// and loopback webhook
    # URLs. Off: an https URL whose host resolves to public addresses only.
    webhooks_allow_loopback: bool = False
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=60)
    webhook_concurrency: int = Field(default=16, ge=1, le=64)
    webhook_poll_s: float = Field(default=1.0, gt=0, le=3600)
    # How long an old secret keeps signing beside the new one after a rotation.
    webhook_secret_overlap_s: int = Field(default=86_400, ge=0, le=7 * 86_400)
    # Finished delivery rows (delivered, failed, cancelled) older than this
    # are pruned by the deliverer, but the newest 50 of each subscription
    # (its delivery log) are kept whatever their age.
    webhook_delivery_retention_days: int = Field(default=30, ge=1, le=3650)
    # Outbox events older than this, and superseded by a later event of their
    # subject, are compacted away by the deliverer (docs/decisions/events.md,
    # "Compaction"); younger ones are all kept.
    events_keep_days: int = Field(default=7, ge=1, le=3650)

    # OAuth 2.1 for the MCP server (docs/decisions/oauth.md): token lifetimes,
    # how long a consent waits and a Client ID Metadata Document is kept.
    oauth_access_token_ttl_s: int = Field(default=3600, ge=30, le=86_400)
    oauth_refresh_token_ttl_s: int = Field(default=30 * 86_400, ge=60, le=365 * 86_400)
    oauth_code_ttl_s: int = Field(default=120, ge=10, le=600)
    oauth_consent_ttl_s: int = Field(default=600, ge=30, le=3600)
    oauth_client_metadata_ttl_s: int = Field(default=3600, ge=0, le=7 * 86_400)
    # Tests and local development only: accept client ids (metadata document
    # URLs) on http://127.0.0.1 / localhost. Off by default: a client id must be
    # an https URL whose host resolves to public addresses only.
    oauth_client_metadata_allow_loopback: bool = False
    # Metadata-document fetches in flight at once in one Api replica; more
    # are refused (as an unknown client) until one ends (issue 45, M2).
    oauth_client_metadata_fetches: int = Field(default=8, ge=1, le=1000)
    # A refresh token presented again this soon after it was spent, by the
    # same client, gets a pair too instead of revoking its family: two
    # refreshes at once (issue 45, L7). 0: every reuse revokes.
    oauth_refresh_reuse_grace_s: int = Field(default=10, ge=0, le=120)

    # Semantic search (docs/decisions/search.md, "Search")
    embedding_model: str = Field(default="all-MiniLM-L6-v2", min_length=1)
    embedding_device: str = Field(default="auto", pattern=r"^(auto|cpu|cuda(:\d+)?|mps)$")
    embedding_max_batch: int = Field(default=64, ge=1, le=4096)
    embedder_min_replicas: int = Field(default=1, ge=0, le=1000)
    embedder_max_replicas: int = Field(default=2, ge=1, le=1000)
    embedder_num_cpus: float = Field(default=0.5, ge=0)
    embedder_num_gpus: float = Field(default=0, ge=0)
    embedder_threads: int = Field(default=0, ge=0, le=1024)
    # ONNX Runtime on the CPU, PyTorch on a GPU (auto); int8 is measured and
    # not the default (docs/decisions/search-at-scale.md, "The Embedder on ONNX Runtime").
    embedding_backend: str = Field(default="auto", pattern=r"^(auto|onnx|torch)$")
    embedding_precision: str = Field(default="fp32", pattern=r"^(fp32|int8)$")
    # Where exported model graphs (ONNX, the bf16 package) are cached
    # (CAIRN_MODEL_CACHE_DIR; default STATE_DIR/models). A folder the nodes of
    # a cluster, or several state folders, share exports each model once: a
    # graph is written aside and renamed, a package compiled under a lock.
    model_cache_dir: Path | None = None
    search_semantic: bool = True
    # The BM25 index each Api process holds (serve_app/runtime/index_copies/lexical.py), and how
    # stale it may be: 0, every search first reads the change log (one small
    # indexed query; full text sees every committed write); above 0, only a
    # search finding the last read older than this does (docs/decisions/search.md,
    # "Lexical ranking and fusion (issue 23)").
    search_lexical: bool = True
    search_lexical_refresh_s: float = Field(default=0.0, ge=0, le=3600)
    # Where that index lives (docs/decisions/search-at-scale.md, "One BM25 index per
    # node"): "disk", one per node in a folder every Api process on it opens
    # memory-mapped (LEXICAL_DIR/<host>, default STATE_DIR/bm25/<host>); a
    # process whose folder fails falls back to its own in memory; "memory",
    # each process its own, in its heap.
    search_lexical_store: str = Field(default="disk", pattern=r"^(disk|memory)$")
    search_lexical_dir: Path | None = None
    # A copy of the vector index in each Api replica (serve_app/runtime/index_copies/vectors.py):
    # semantic search without a hop to the VectorIndex, at the cost of the
    # index's memory in every replica; at most refresh_s behind the VectorIndex
    # (docs/decisions/deployment-and-operations.md, "Serve path performance (issue 21)").
    search_replica_vectors: bool = True
    search_replica_vectors_refresh_s: float = Field(default=1.0, ge=0, le=3600)
    # How the Api replicas' copies of the HNSW graphs hold the vectors: sq8
    # (8-bit codes, a quarter of the memory) or float (exact scores).
    search_replica_codes: str = Field(default="sq8", pattern=r"^(sq8|float)$")
    search_flat_max: int = Field(default=20_000, ge=1)
    search_hnsw_max: int = Field(default=2_000_000, ge=1)
    search_hnsw_ef: int = Field(default=256, ge=1, le=65_536)
    # The HNSW graph's build: links a node keeps (M) and candidates explored
    # while adding one (efConstruction); recall at a million depends on them
    # (docs/decisions/search-at-scale.md, "HNSW build parameters at a million").
    search_hnsw_m: int = Field(default=32, ge=4, le=256)
    search_hnsw_ef_construction: int = Field(default=40, ge=8, le=4096)
    # A graph search explores at least one candidate per this many nodes.
    search_hnsw_nodes_per_ef: int = Field(default=1000, ge=1)
    search_nprobe: int = Field(default=64, ge=1, le=65_536)
    search_batch_size: int = Field(default=64, ge=1, le=4096)
    search_poll_s: float = Field(default=5.0, gt=0, le=3600)
    search_query_timeout_s: float = Field(default=1.0, gt=0, le=60)
    similar_min_score: float = Field(default=0.6, ge=-1, le=1)

    # Rate limits: "<count>/<period>", period one of second, minute, hour, day
    # (or "<n>s" style multiples, e.g. "5/30s").
    ratelimit_registration: RateText = "10/hour"
    ratelimit_pattern_create: RateText = "5/hour"
    ratelimit_question_create: RateText = "5/hour"
    ratelimit_answer_create: RateText = "10/hour"
    ratelimit_comment: RateText = "30/hour"
    ratelimit_vote: RateText = "100/hour"
    ratelimit_search: RateText = "60/minute"
    # Diffs between two revisions (per address, anonymous or not): docs/security.md H1.
    ratelimit_revision_diff: RateText = "30/minute"
    ratelimit_general: RateText = "1000/hour"
    ratelimit_login: RateText = "30/hour"
    # Claims, re-links and re-link codes per human: each may ask X about a post.
    ratelimit_claim: RateText = "20/hour"
    ratelimit_upload: RateText = "30/hour"
    # Verifications (docs/decisions/trust.md): per agent, and per client address
    # so a burst of fresh bots from one machine is held like registration.
    ratelimit_verify: RateText = "30/hour"
    ratelimit_verify_address: RateText = "60/hour"
    # Public reads without a key, per client IP (docs/decisions/rate-limits.md,
    # "Security: read costs"): 5 a second for a whole minute.
    ratelimit_anon_read: RateText = "300/minute"
    # Anonymous GET /api/health per client address (it answers from a snapshot).
    ratelimit_health: RateText = "120/minute"
    # OAuth (issue 45): dynamic client registrations, and fetches of client
    # metadata documents not yet kept, per client address.
    ratelimit_oauth_register: RateText = "100/hour"
    ratelimit_oauth_client_fetch: RateText = "30/hour"
    # One shard serves a node's replicas (docs/decisions/rate-limits.md, "How many
    # shards"); a cluster of several nodes raises it.
    ratelimit_shards: int = Field(default=1, ge=1, le=64)

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _split_cidrs(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            for cidr in value:
                ipaddress.ip_network(str(cidr), strict=False)  # raises on garbage
        return value

    @field_validator("smtp_url")
    @classmethod
    def _valid_smtp_url(cls, value: SecretStr | None) -> SecretStr | None:
        # A typo fails `cairn run` at start, not the first e-mail an hour later.
        if value is not None and value.get_secret_value().strip():
            parse_smtp_url(value.get_secret_value())
        return value

    @field_validator("x_oembed_url", "captcha_verify_url")
    @classmethod
    def _valid_outbound_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Only http(s) URLs with a host: the one host outbound calls may reach.
        if value is None or not value.strip():
            if info.field_name == "x_oembed_url":
                raise ValueError("CAIRN_X_OEMBED_URL must not be empty")
            return None  # no captcha verifier: the static test token applies
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL with a host: {value!r}")
        return value.strip()

    @field_validator(
        "ratelimit_registration",
        "ratelimit_pattern_create",
        "ratelimit_question_create",
        "ratelimit_answer_create",
        "ratelimit_comment",
        "ratelimit_vote",
        "ratelimit_search",
        "ratelimit_revision_diff",
        "ratelimit_general",
        "ratelimit_login",
        "ratelimit_claim",
        "ratelimit_upload",
        "ratelimit_verify",
        "ratelimit_verify_address",
        "ratelimit_anon_read",
        "ratelimit_health",
        "ratelimit_oauth_register",
        "ratelimit_oauth_client_fetch",
    )
    @classmethod
    def _valid_rate(cls, value: str) -> str:
        parse_rate(value)
        return value

    # Derived values -------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.state_dir.expanduser().resolve()

    @property
    def lexical_store_root(self) -> Path | None:
        """The folder of this node's shared BM25 indexes; None: in memory."""
        if self.search_lexical_store != "disk":
            return None
        base = self.search_lexical_dir or self.state_path / "bm25"
        # Per host: a state folder on a shared file system must not be
        # memory-mapped and locked across machines.
        return base.expanduser().resolve() / socket.gethostname()

    @property
    def model_cache_path(self) -> Path:
        """Where exported model graphs are cached (``model_cache_dir``)."""
        if self.model_cache_dir is not None:
            return self.model_cache_dir.expanduser().resolve()
        return self.state_path / "models"

    @property
    def export_path(self) -> Path:
        """Where the periodic export is published (``export_dir``)."""
        if self.export_dir is not None:
            return self.export_dir.expanduser().resolve()
        return self.state_path / "export"

    @property
    def uploads_dir(self) -> Path:
        """The local-disk store's folder (and where files to move into Postgres are)."""
        return self.state_path / "uploads"

    @property
    def base_url(self) -> str:
        if self.public_base_url:
            return self.public_base_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"

    @property
    def mcp_url(self) -> str:
        """The MCP server's URL: the OAuth resource its tokens are bound to."""
        return f"{self.base_url}/mcp"

    @property
    def smtp_address(self) -> str | None:
        """The SMTP URL, or None when unset or blank (then no mail is queued)."""
        url = self.smtp_url.get_secret_value().strip() if self.smtp_url else ""
        return url or None

    @property
    def mail_enabled(self) -> bool:
        return self.smtp_address is not None

    @property
    def mail_sender(self) -> str:
        if self.mail_from:
            return self.mail_from
        host = urlsplit(self.base_url).hostname or "localhost"
        return f"Cairn <noreply@{host}>"

    def rules(self) -> dict[str, Rule]:
        """The rate-limit table, keyed by rule name."""
        table = {
            "registration": self.ratelimit_registration,
            "pattern_create": self.ratelimit_pattern_create,
            "question_create": self.ratelimit_question_create,
            "answer_create": self.ratelimit_answer_create,
            "comment": self.ratelimit_comment,
            "vote": self.ratelimit_vote,
            "search": self.ratelimit_search,
            "revision_diff": self.ratelimit_revision_diff,
            "general": self.ratelimit_general,
            "login": self.ratelimit_login,
            "claim": self.ratelimit_claim,
            "upload": self.ratelimit_upload,
            "verify": self.ratelimit_verify,
            "verify_address": self.ratelimit_verify_address,
            "anon_read": self.ratelimit_anon_read,
            "health": self.ratelimit_health,
            "oauth_register": self.ratelimit_oauth_register,
            "oauth_client_fetch": self.ratelimit_oauth_client_fetch,
        }
        out = {}
        for name, text in table.items():
            limit, window = parse_rate(text)
            out[name] = Rule(name=name, limit=limit, window_s=window)
        return out

    def indexer_config(self, database_url: str) -> IndexerConfig:
        return IndexerConfig(
            database_url=database_url,
            model=self.embedding_model,
            batch_size=self.search_batch_size,
            poll_s=self.search_poll_s,
            query_timeout_s=self.search_query_timeout_s,
            index=IndexConfig(
                flat_max=self.search_flat_max,
                hnsw_max=self.search_hnsw_max,
                hnsw_m=self.search_hnsw_m,
                hnsw_ef_construction=self.search_hnsw_ef_construction,
                hnsw_ef_search=self.search_hnsw_ef,
                hnsw_nodes_per_ef=self.search_hnsw_nodes_per_ef,
                nprobe=self.search_nprobe,
            ),
        )

    def embedder_config(self, database_url: str = "") -> EmbedderConfig:
        return EmbedderConfig(
            database_url=database_url,
            model=self.embedding_model,
            device=self.embedding_device,
            max_batch_size=self.embedding_max_batch,
            threads=self.embedder_threads,
            backend=self.embedding_backend,
            precision=self.embedding_precision,
            cache_dir=str(self.model_cache_path),
        )

    def trusted_networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        return [ipaddress.ip_network(c, strict=False) for c in self.trusted_proxies]

    def secret_bytes(self) -> bytes:
        """The HMAC key for API keys; generated into the state folder on first use."""
        if self.secret_key is not None:
            return self.secret_key.get_secret_value().encode()
        return load_or_create_secret(self.state_path).encode()


def load_or_create_secret(state_dir: Path) -> str:
    """Read ``<state>/secret_key`` or create it (0600) with 256 random bits."""
    path = state_dir / "secret_key"
    if path.exists():
        return path.read_text().strip()
    state_dir.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(32)
    # Written whole under a name of its own, 0600 from its creation, then
    # linked into place: no reader sees a part of it, nobody else ever can.
    tmp = temporary_beside(path)
    create_private(tmp, value.encode())
    try:
        # link() fails if another process won the race; then use theirs.
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return path.read_text().strip()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
