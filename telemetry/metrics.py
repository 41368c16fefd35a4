"""Cairn's own metrics: every family it exports, named once here.

Recorded with Ray's metrics API (``ray.util.metrics``): each node's metrics
agent exports them with Ray's own on its Prometheus endpoint (the port in
``<ray temp>/session_latest/metrics_export_port_*``; the targets in Ray's
service-discovery file), prefixed ``ray_`` (``cairn_requests_total`` is
scraped as ``ray_cairn_requests_total``) and labelled by Ray with the node and
the worker process. Every Cairn process that serves or works runs in Ray (the
Api replicas, the Embedder, the VectorIndex, the dispatcher), so no second
exporter (``prometheus_client``) is needed; outside Ray (API tests, the
uvicorn benchmark) and with ``CAIRN_METRICS=false`` recording is a no-op
(docs/decisions/deployment-and-operations.md, "Metrics").

Label sets are bounded: route templates and tool names, never raw paths or
ids. Per-event cost is one dict lookup for the bound series and Ray's
record call: ``Family.labels(...)`` caches one bound recorder per label tuple.

This module sits in ``telemetry``, the bottom package, so the Embedder and
VectorIndex (``embeddings``), the dispatcher (``actors``) and the Api
(``serve_app``) all import the same names without ``actors`` and
``embeddings`` depending on each other.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("cairn.metrics")

# ``CAIRN_METRICS`` (serve_app.settings.Settings.metrics): false turns every
# recorder into a no-op (benchmarks compare the Serve path with and without).
ENV = "CAIRN_METRICS"
# What Ray's exporter puts before every application metric's name.
EXPORT_PREFIX = "ray_"

SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SIZES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0)

_switch: bool | None = None


def configure(enabled: bool | None) -> None:
    """Turn recording on or off in this process (before the first record);
    None: as ``CAIRN_METRICS`` says."""
    global _switch
    _switch = enabled


def enabled() -> bool:
    """Whether this process records: switched on, and inside Ray."""
    on = _switch
    if on is None:
        on = os.environ.get(ENV, "true").strip().lower() not in ("0", "false", "no", "off")
    if not on:
        return False
    import ray

    return bool(ray.is_initialized())


class _Off:
    """A recorder that records nothing (metrics off, or outside Ray)."""

    def inc(self, value: float = 1.0) -> None:
        return None

    def observe(self, value: float) -> None:
        return None

    def set(self, value: float) -> None:
        return None


_OFF = _Off()


class _Bound:
    """One series of a family: its tags bound once."""

    __slots__ = ("_metric", "_tags")

    def __init__(self, metric: Any, tags: dict[str, str] | None) -> None:
        self._metric = metric
        self._tags = tags

    def inc(self, value: float = 1.0) -> None:
        self._metric.inc(value, self._tags)

    def observe(self, value: float) -> None:
        self._metric.observe(value, self._tags)

    def set(self, value: float) -> None:
        self._metric.set(value, self._tags)


# Ray (2.60) exports a gauge only while it is set again: one set once and
# left alone leaves the node's endpoint about 30 s later (measured: an actor
# that set ``cairn_embedder_replicas`` at start was gone from Prometheus once
# it had run for a minute). A Prometheus gauge holds its last value, so each
# process sets its gauges' last values again every ``HOLD_EVERY_S``.
HOLD_EVERY_S = 5.0


class _HeldGauge(_Bound):
    """A gauge's series: its last value is set again by the holder thread."""

    __slots__ = ("value",)

    def __init__(self, metric: Any, tags: dict[str, str] | None) -> None:
        super().__init__(metric, tags)
        self.value: float | None = None

    def set(self, value: float) -> None:
        self.value = value
        self._metric.set(value, self._tags)
        _hold(self)


_held: set[_HeldGauge] = set()
_holder: threading.Thread | None = None
_holder_lock = threading.Lock()


def _hold(series: _HeldGauge) -> None:
    """Keep ``series`` among those set again (started on a process's first gauge)."""
    global _holder
    if series in _held:
        return
    with _holder_lock:
        _held.add(series)
        if _holder is None:
            _holder = threading.Thread(target=_hold_forever, name="cairn-gauges", daemon=True)
            _holder.start()


def hold_once() -> int:
    """Set every held gauge's last value again; how many were set."""
    n = 0
    for series in list(_held):
        value = series.value
        if value is None:
            continue
        try:
            series._metric.set(value, series._tags)
        except Exception:
            log.exception("gauge could not be set again")
        else:
            n += 1
    return n


def _hold_forever() -> None:
    while True:
        time.sleep(HOLD_EVERY_S)
        hold_once()


class Family:
    """One metric family: ``kind`` counter, gauge or histogram. The Ray metric
    is made on first use in each process (a Ray metric made before the
    process joins Ray would not export)."""

    def __init__(
        self,
        name: str,
        kind: str,
        description: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = (),
    ) -> None:
        self.name = name
        self.kind = kind
        self.description = description
        self.label_names = tuple(labels)
        self.buckets = tuple(buckets)
        self._series: dict[tuple[str, ...], _Bound | _Off] = {}
        self._metric: Any = None
        self._lock = threading.Lock()
        CATALOG.append(self)

    @property
    def exported(self) -> str:
        """The name Prometheus sees (Ray's prefix; a histogram adds
        ``_bucket``, ``_sum`` and ``_count``)."""
        return EXPORT_PREFIX + self.name

    def _make(self) -> Any:
        from ray.util import metrics

        keys = self.label_names or None
        if self.kind == "counter":
            return metrics.Counter(self.name, self.description, tag_keys=keys)
        if self.kind == "gauge":
            return metrics.Gauge(self.name, self.description, tag_keys=keys)
        return metrics.Histogram(
            self.name, self.description, boundaries=list(self.buckets), tag_keys=keys
        )

    def labels(self, *values: str) -> _Bound | _Off:
        """The recorder of the series with these label values (in the order
        of ``label_names``); cached, so a hot path pays one lookup."""
        found = self._series.get(values)
        if found is not None:
            return found
        with self._lock:
            if len(values) != len(self.label_names):
                raise ValueError(f"{self.name} takes labels {self.label_names}, got {values}")
            bound: _Bound | _Off = _OFF
            if enabled():
                try:
                    if self._metric is None:
                        self._metric = self._make()
                except Exception:
                    # A metric never fails the work it measures.
                    log.exception("metric %s cannot be recorded", self.name)
                else:
                    tags = dict(zip(self.label_names, values, strict=True)) or None
                    held = self.kind == "gauge"
                    bound = (_HeldGauge if held else _Bound)(self._metric, tags)
            self._series[values] = bound
        return bound

    # Unlabelled families.
    def inc(self, value: float = 1.0) -> None:
        self.labels().inc(value)

    def observe(self, value: float) -> None:
        self.labels().observe(value)

    def set(self, value: float) -> None:
        self.labels().set(value)


CATALOG: list[Family] = []


def counter(name: str, description: str, labels: Sequence[str] = ()) -> Family:
    return Family(name, "counter", description, labels)


def gauge(name: str, description: str, labels: Sequence[str] = ()) -> Family:
    return Family(name, "gauge", description, labels)


def histogram(
    name: str, description: str, labels: Sequence[str] = (), buckets: Sequence[float] = SECONDS
) -> Family:
    return Family(name, "histogram", description, labels, buckets)


# --- requests (the Api replicas) ------------------------------------------------

REQUESTS = counter(
    "cairn_requests_total",
    "Requests answered, by door (rest, page, stream, mcp, mcp_transport, docs, "
    "none), route template or MCP tool, and status class.",
    ("door", "route", "status_class"),
)
REQUEST_SECONDS = histogram(
    "cairn_request_seconds",
    "Time to answer a request (to the end of its body; a stream: its life), by door and route.",
    ("door", "route"),
)

# --- search -----------------------------------------------------------------------

SEARCHES = counter(
    "cairn_searches_total",
    "Searches by the mode served (semantic, fulltext, fallback) and why "
    "(fallback: semantic_unavailable, semantic_disabled; fulltext: requested), "
    "and which lexical index ranked (bm25, postgres).",
    ("mode", "reason", "lexical"),
)
SEARCH_STAGE_SECONDS = histogram(
    "cairn_search_stage_seconds",
    "Time of one search stage: query_embedding, vector_search, vectors (the "
    "semantic half as the Api waits for it), lexical, fusion, hydration.",
    ("stage",),
)
SEMANTIC_FAILURES = counter(
    "cairn_semantic_failures_total",
    "Semantic lookups that could not answer (the search then falls back), by "
    "where (replica copy, vector_index, local) and reason (timeout, not_ready, error).",
    ("where", "reason"),
)
QUERY_VECTOR_CACHE = counter(
    "cairn_query_vector_cache_total",
    "Query-vector cache lookups by where (replica, embedder, vector_index, local) "
    "and result (hit, miss).",
    ("where", "result"),
)

# --- Embedder and VectorIndex ----------------------------------------------------

EMBEDDER_QUEUE = gauge(
    "cairn_embedder_queue_depth",
    "Queries and bulk calls waiting or encoding in this Embedder replica (what it autoscales on).",
)
EMBEDDER_BATCH = histogram(
    "cairn_embedder_batch_size",
    "Texts per encode call, by call (query: batched single texts, bulk: the worker's lists).",
    ("call",),
    SIZES,
)
EMBEDDER_ENCODE_SECONDS = histogram(
    "cairn_embedder_encode_seconds", "Time of one encode call on the model, by call.", ("call",)
)
EMBEDDER_REPLICAS = gauge(
    "cairn_embedder_replicas", "1 per running Embedder replica (sum for the count)."
)
INDEX_VECTORS = gauge("cairn_index_vectors", "Vectors in the VectorIndex, by kind.", ("kind",))
INDEX_LAG_ROWS = gauge(
    "cairn_index_lag_rows", "Rows changed in Postgres and not yet in the VectorIndex (queued jobs)."
)
INDEX_LAG_SECONDS = gauge(
    "cairn_index_lag_seconds", "Age of the oldest change not yet in the VectorIndex (0: none)."
)
INDEX_COPY_LAG_SECONDS = gauge(
    "cairn_index_copy_lag_seconds",
    "Seconds since an Api replica's copy (vectors, bm25) last read the change log "
    "(it reads on a search once its refresh interval has passed); -1 while it is being built.",
    ("copy",),
)

# --- admission ----------------------------------------------------------------------

RATE_LIMITED = counter(
    "cairn_rate_limited_total", "Requests refused by a rate-limit rule (429), by rule.", ("rule",)
)
ADMISSION_REFUSALS = counter(
    "cairn_admission_refusals_total",
    "Requests or tool calls admission refused, by reason (the error code: "
    "rate_limited, invalid_api_key, too_many_streams, ...).",
    ("reason",),
)
IDEMPOTENT_REPLAYS = counter(
    "cairn_idempotent_replays_total",
    "Repeats of a keyed create answered with the stored answer, by door.",
    ("door",),
)

# --- streams and the database ------------------------------------------------------

STREAMS_OPEN = gauge(
    "cairn_streams_open", "Long-lived answers open in this replica, by kind.", ("kind",)
)
STREAM_SLOTS_CAP = gauge(
    "cairn_stream_slots_cap", "Long-lived connections one Api replica may hold."
)
DB_POOL_IN_USE = gauge("cairn_db_pool_in_use", "Pooled database connections checked out.")
DB_POOL_SIZE = gauge(
    "cairn_db_pool_size", "Database connections the pool may hold (size plus overflow)."
)
DB_POOL_WAITERS = gauge("cairn_db_pool_waiters", "Requests waiting for a pooled connection.")
DB_UNAVAILABLE = counter(
    "cairn_db_unavailable_total",
    "Answers of 503 database_unavailable (the database unreachable), by door.",
    ("door",),
)

# --- the dispatcher ----------------------------------------------------------------

DISPATCH_BACKLOG = gauge(
    "cairn_dispatch_backlog",
    "Work waiting in the dispatcher's queues: fanout_jobs, followers_pending, "
    "mail_pending, mail_failed.",
    ("queue",),
)
MAIL_RETRIES = counter("cairn_mail_retries_total", "E-mail sends that failed and will be retried.")
MAIL_FAILURES = counter(
    "cairn_mail_failures_total", "E-mail sends that failed for good (no more retries)."
)


# --- the search model and tune jobs -------------------------------------------------

SEARCH_MODEL = gauge(
    "cairn_search_model",
    "1 for the model the VectorIndex searches with, by model (the packaged name or "
    "a tuned version's name; a few over a cluster's life), 0 for one it served before.",
    ("model",),
)
TUNE_JOBS = counter(
    "cairn_tune_jobs_total",
    "`cairn tune` jobs that ran on the cluster, by outcome (accepted, rejected by the "
    "gate, failed), counted by the job's driver as it ends.",
    ("outcome",),
)
TUNE_PAIRS = counter(
    "cairn_tune_pairs_total", "Pairs mined by tune jobs, by set (train, heldout, extra).", ("set",)
)
TUNE_STEPS = counter("cairn_tune_steps_total", "Training steps taken by tune jobs.")
TUNE_LOSS = gauge(
    "cairn_tune_loss", "The running tune job's training loss (the mean of its last reported steps)."
)
TUNE_SECONDS = histogram(
    "cairn_tune_seconds",
    "Time of a tune job by stage (train, gate, job: all of it).",
    ("stage",),
    (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0),
)


def exported_names() -> set[str]:
    """Every series name Prometheus can see from Cairn (histograms' three)."""
    names: set[str] = set()
    for family in CATALOG:
        if family.kind == "histogram":
            names.update(family.exported + s for s in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.exported)
    return names


def failure_reason(exc: BaseException) -> str:
    """A semantic lookup's failure as a bounded label: timeout, not_ready, error."""
    if isinstance(exc, TimeoutError):
        return "timeout"
    # The VectorIndex's NotReady, also when it comes wrapped in a Ray error.
    if "NotReady" in type(exc).__name__ or "NotReady" in str(exc)[:200]:
        return "not_ready"
    return "error"


# --- content screening (issue 49, docs/decisions/safety.md) ------------------

SCREENED = counter(
    "cairn_screening_outcomes_total",
    "Writes the content screen judged (create, edit, rollback, fork; REST, MCP and web alike), "
    "by kind (pattern, question, answer, comment, collection, profile, verification) and "
    "outcome (passed, labelled, held, refused_secret, refused_hidden, refused_instructions).",
    ("kind", "outcome"),
)

RESCREENED = counter(
    "cairn_rescreen_items_total",
    "Items a rescreen (cairn rescreen) applied the current ruleset to, by kind "
    "(pattern, question, answer) and outcome (unchanged, labelled, held, hidden, released).",
    ("kind", "outcome"),
)
REVISIONS_REDACTED = counter(
    "cairn_rescreen_revisions_redacted_total",
    "Old revisions a rescreen redacted because a field held a secret or hidden text, "
    "by kind (pattern, answer); staff get a safety_report for each.",
    ("kind",),
)
