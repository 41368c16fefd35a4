"""The Embedder's autoscaling policy: Serve's own, counting queries, not calls.

Serve's default policy targets the handle calls a deployment has in flight.
The Embedder's callers send the queries that waited together in one call
(``deployments.EmbedderQueries``), so each caller has at most one call out
and the calls say nothing about the load. Each Embedder replica reports the
queries and bulk calls it holds, waiting or encoding
(``Embedder.record_autoscaling_stats``: the ``ray_cairn_embedder_queue_depth``
gauge's value); this policy asks for ``held / target_ongoing_requests``
replicas, which is what the default asks for with calls (one replica per
target's worth, ``target_ongoing_requests``: a full batch of queries). Serve
applies the deployment's bounds, delays and factors to the answer as it does
to its own policy's.
"""

from __future__ import annotations

import math
from typing import Any

# The custom metric each Embedder replica reports.
QUEUED = "queued"
# The import path Serve's controller loads the policy by.
QUEUED_POLICY = "embeddings.autoscaling:queued_policy"


def queued_policy(ctx: Any) -> tuple[float, dict[str, Any]]:
    """Replicas for the queries the running replicas hold (averaged by Serve
    over its look-back period), or for the calls in flight where those are
    more (a replica that has not reported yet); with no replica running,
    Serve's own start."""
    if ctx.current_num_replicas == 0:
        return ctx.target_num_replicas, {}
    held = (ctx.aggregated_metrics or {}).get(QUEUED, {})
    queued = sum(v for v in held.values() if not math.isnan(v))
    load = max(queued, float(ctx.total_num_requests or 0.0))
    return load / ctx.config.get_target_ongoing_requests(), {}
