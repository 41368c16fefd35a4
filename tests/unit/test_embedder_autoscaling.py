"""The Embedder scales on the queries it holds, not on handle calls
(embeddings/autoscaling.py), through Serve's own policy machinery."""

from __future__ import annotations

from typing import Any

from ray.serve._private.common import DeploymentID, ReplicaID
from ray.serve.autoscaling_policy import _apply_autoscaling_config
from ray.serve.config import AutoscalingConfig, AutoscalingContext, AutoscalingPolicy

from embeddings.autoscaling import QUEUED, QUEUED_POLICY, queued_policy
from embeddings.deployments import Embedder

DEPLOYMENT = DeploymentID(name="Embedder", app_name="cairn")


def context(
    held: list[float], calls: float, config: AutoscalingConfig, running: int | None = None
) -> AutoscalingContext:
    replicas = [ReplicaID(unique_id=f"r{i}", deployment_id=DEPLOYMENT) for i in range(len(held))]
    n = len(held) if running is None else running
    return AutoscalingContext(
        deployment_id=DEPLOYMENT,
        deployment_name="Embedder",
        app_name="cairn",
        current_num_replicas=n,
        target_num_replicas=n,
        running_replicas=replicas,
        total_num_requests=calls,
        total_queued_requests=0.0,
        aggregated_metrics={QUEUED: dict(zip(replicas, held, strict=True))},
        raw_metrics=None,
        capacity_adjusted_min_replicas=config.min_replicas,
        capacity_adjusted_max_replicas=config.max_replicas,
        policy_state={},
        last_scale_up_time=None,
        last_scale_down_time=None,
        current_time=None,
        config=config,
    )


def config(**kwargs: Any) -> AutoscalingConfig:
    return AutoscalingConfig(min_replicas=1, max_replicas=4, target_ongoing_requests=64, **kwargs)


def test_the_policy_counts_queries_held_not_calls() -> None:
    # Two callers with one call out each, holding 200 queries between them.
    desired, _ = queued_policy(context([150.0, 50.0], calls=2.0, config=config()))
    assert desired == 200 / 64
    # A replica that has not reported yet: the calls in flight count.
    desired, _ = queued_policy(context([0.0], calls=90.0, config=config()))
    assert desired == 90 / 64
    # Nothing running: Serve's own start.
    assert queued_policy(context([], calls=5.0, config=config(), running=0))[0] == 0


def test_serve_applies_the_deployments_delays() -> None:
    # Serve wraps a custom policy in its own delays and factors (and bounds
    # the answer by min_replicas and max_replicas after it).
    policy = _apply_autoscaling_config(queued_policy)
    now = config(upscale_delay_s=0, downscale_delay_s=0)
    assert policy(context([1000.0], calls=1.0, config=now))[0] == 16  # ceil(1000 / 64)
    # An idle Embedder goes down, never below one replica this way.
    assert policy(context([0.0, 0.0], calls=0.0, config=now))[0] == 1
    # With the default delay (30 s), one busy tick does not scale yet.
    assert policy(context([1000.0], calls=1.0, config=config()))[0] == 1


def test_the_deployment_names_the_policy_and_reports_what_it_holds() -> None:
    loaded = AutoscalingPolicy(policy_function=QUEUED_POLICY).get_policy()
    assert (loaded.__module__, loaded.__name__) == ("embeddings.autoscaling", "queued_policy")
    embedder = Embedder.func_or_class.__new__(Embedder.func_or_class)
    embedder._queued = 7
    assert embedder.record_autoscaling_stats() == {QUEUED: 7.0}
