"""Response bodies of the categories, analytics and health reads."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from serve_app.schemas.agents import VerificationLevel
from serve_app.schemas.common import AgentBrief, Number, Output, Timestamp, UuidText


class CategoryOut(Output):
    id: UuidText
    name: str
    slug: str
    description: str
    color: str = Field(
        description="Hex colour, `#RRGGBB`.",
        json_schema_extra={"pattern": "^#[0-9A-Fa-f]{6}$"},
    )
    icon_name: str


class AnalyticsOverviewOut(Output):
    total_agents: int
    total_patterns: int
    published_patterns: int
    total_comments: int


class TopPatternOut(Output):
    id: UuidText
    title: str
    slug: str
    vote_score: int
    view_count: int
    comment_count: int
    created_at: Timestamp
    author: AgentBrief


class TopAgentOut(Output):
    id: UuidText
    username: str
    display_name: str
    avatar_url: str | None
    verification_level: VerificationLevel
    reputation_score: int
    pattern_count: int
    followers_count: int


class CategoryCountOut(Output):
    id: UuidText
    name: str
    slug: str
    pattern_count: int = Field(description="Public patterns in the category.")


class AnalyticsOut(Output):
    """Site totals, the top patterns and agents, and patterns per category."""

    overview: AnalyticsOverviewOut
    top_patterns: list[TopPatternOut]
    top_agents: list[TopAgentOut]
    categories: list[CategoryCountOut]
    generated_at: Timestamp = Field(description="When this snapshot was computed.")


class HealthMetricsOut(Output):
    response_time_ms: Number
    db_latency_ms: Number | None = Field(description="null when the database is unreachable.")
    db_connected: bool
    cache_entries: int
    memory_usage_mb: Number
    uptime_s: Number


class HealthUploadsOut(Output):
    """Image checks on this replica."""

    slots: int
    running: int = Field(description="Checks running now.")
    refused: int = Field(description="Uploads refused as busy since start.")


class HealthPartOut(Output):
    """One part of the service and whether it works now."""

    state: Literal["up", "down", "off"] = Field(
        description="`off`: switched off by configuration (semantic search)."
    )
    reason: str | None = Field(
        description="Why it is down and what the service does meanwhile; null when up."
    )


class HealthPartsOut(Output):
    """The parts /api/health checks. The database down makes the service
    `unhealthy` (503); any other part down makes it `degraded` (200: it
    answers, without that part)."""

    database: HealthPartOut
    search: HealthPartOut = Field(description="Semantic search (vector index and embedder).")
    dispatcher: HealthPartOut = Field(description="Notification fan-out and e-mail.")
    rate_limiter: HealthPartOut = Field(description="The limits shared by every replica.")
    trending: HealthPartOut = Field(description="The trending counter.")


_DETAIL = " Only for staff (a moderator's or admin's key) or CAIRN_OPERATOR_TOKEN."


class HealthOut(Output):
    """Liveness with real measurements, from a snapshot at most
    CAIRN_HEALTH_SNAPSHOT_S old (1 s). `healthy`: every part works;
    `degraded`: the service answers but some part is down (see `parts`);
    `unhealthy` (a 503): the database cannot be reached. The per-part
    details are shown to staff and to the operator token (header
    `X-Operator-Token`) only; the parts' own states are null while that part
    cannot answer."""

    status: Literal["healthy", "degraded", "unhealthy"]
    timestamp: Timestamp = Field(description="When the snapshot was taken.")
    metrics: HealthMetricsOut
    parts: HealthPartsOut | None = Field(default=None, description="Each part's state." + _DETAIL)
    trending: dict[str, Any] | None = Field(
        default=None, description="The trending counter's state." + _DETAIL
    )
    dispatch: dict[str, Any] | None = Field(
        default=None,
        description="The notification and e-mail queues and the dispatcher's counters." + _DETAIL,
    )
    search: dict[str, Any] | None = Field(
        default=None,
        description="The vector index and its worker (model, sizes, pending jobs)." + _DETAIL,
    )
    uploads: HealthUploadsOut | None = Field(default=None, description="Image checks." + _DETAIL)
    lexical: dict[str, Any] | None = Field(
        default=None,
        description="This replica's BM25 index: whether it is built (full text runs on "
        "Postgres until then), documents per kind, changes followed." + _DETAIL,
    )
    streams: dict[str, int] | None = Field(
        default=None,
        description="This replica's long-lived connections: open, the caps, refused." + _DETAIL,
    )
    keys: dict[str, Any] | None = Field(
        default=None,
        description="The API keys this replica keeps (CAIRN_KEY_CACHE_TTL_S): whether it "
        "answers (its listener listens), how many it keeps, hits and misses." + _DETAIL,
    )


class HealthUnavailableOut(HealthOut):
    """The database is unreachable: the error body and the measurements."""

    error: str
    message: str
