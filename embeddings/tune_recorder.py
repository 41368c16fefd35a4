"""Where ``cairn tune``'s metrics live after its driver exits: one detached
Ray actor per cluster (``TuneRecorder``, named ``cairn-tune-metrics``, no
CPU), created by the first tune and kept by the cluster. The driver sends it
each progress report's loss and, as the job ends, its outcome, pairs, steps
and stage times; the actor records them as ``cairn_tune_*``
(telemetry/metrics.py), so the node's exporter serves them to Prometheus
between jobs and after them (docs/decisions/tuning.md, "Tune metrics outlive
the job").

The actor imports this module and telemetry only: a small process."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from telemetry import metrics

log = logging.getLogger("cairn.tune")

NAME = "cairn-tune-metrics"
NAMESPACE = "cairn"
# How long the driver waits for the recorder to take the job's numbers.
RECORD_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class JobNumbers:
    """What a tune job records as it ends (the summary's numbers)."""

    outcome: str  # accepted, rejected, failed
    seconds: float
    pairs: dict[str, int]  # train, heldout, extra
    steps: int = 0
    loss: float | None = None
    train_s: float | None = None
    gate_s: float | None = None


def record(job: JobNumbers) -> None:
    """Record one job's numbers in this process's metrics."""
    metrics.TUNE_JOBS.labels(job.outcome).inc()
    metrics.TUNE_SECONDS.labels("job").observe(job.seconds)
    for name, n in job.pairs.items():
        if n > 0:
            metrics.TUNE_PAIRS.labels(name).inc(n)
    if job.steps > 0:
        metrics.TUNE_STEPS.inc(job.steps)
    if job.loss is not None:
        metrics.TUNE_LOSS.set(job.loss)
    if job.train_s is not None:
        metrics.TUNE_SECONDS.labels("train").observe(job.train_s)
    if job.gate_s is not None:
        metrics.TUNE_SECONDS.labels("gate").observe(job.gate_s)


class TuneRecorder:
    """The detached actor's class: records what tune drivers send it."""

    def __init__(self) -> None:
        self.jobs = 0

    def loss(self, value: float) -> None:
        metrics.TUNE_LOSS.set(value)

    def job(self, numbers: JobNumbers) -> int:
        """Record a finished job; how many this recorder has recorded."""
        record(numbers)
        self.jobs += 1
        return self.jobs


class Recorder:
    """The driver's side: the cluster's recorder actor, created on first use.
    A recorder that cannot be reached never fails the job: its numbers are
    then recorded in the driver's own process (they leave with it)."""

    def __init__(self) -> None:
        self._actor: Any = None
        self._failed = False

    def _handle(self) -> Any:
        if self._actor is None and not self._failed:
            import ray

            try:
                self._actor = (
                    ray.remote(num_cpus=0)(TuneRecorder)
                    .options(
                        name=NAME,
                        namespace=NAMESPACE,
                        lifetime="detached",
                        get_if_exists=True,
                        max_restarts=-1,
                    )
                    .remote()
                )
            except Exception:
                log.exception("the tune metrics recorder cannot be started")
                self._failed = True
        return self._actor

    def start(self) -> None:
        """Create (or find) the actor now, so it starts while the job runs."""
        self._handle()

    def loss(self, value: float) -> None:
        actor = self._handle()
        if actor is None:
            metrics.TUNE_LOSS.set(value)
            return
        actor.loss.remote(value)  # no wait: a progress line never blocks on it

    def job(self, numbers: JobNumbers) -> None:
        actor = self._handle()
        if actor is not None:
            import ray

            try:
                ray.get(actor.job.remote(numbers), timeout=RECORD_TIMEOUT_S)
                return
            except Exception:
                log.exception("the tune metrics recorder did not take the job's numbers")
        record(numbers)
