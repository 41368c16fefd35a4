"""The tune quality bench's own parts: the job's progress lines timed, the
top 10 by cosine, and its docs section from a real gate's verdict."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from benchmarks import tune_quality_bench as bench
from embeddings import evaluation as ev
from embeddings import tune


def test_log_times_the_stages_and_reads_the_gates_seconds() -> None:
    log = bench.Log()
    tune.Printer(log).say("mining pairs from the corpus (base model 'm')")  # type: ignore[arg-type]
    log.write("cairn tune: 120 pairs from 60 items\n")
    log.write("cairn tune: measured the base model on 6 groups in 3s\n")
    log.write("cairn tune: measured the tuned model on 6 groups in 41s\n")
    assert log.between("mining pairs", " pairs from ") >= 0.0
    assert log.between("never said", "pairs") == 0.0
    assert log.measured() == {"base": 3.0, "tuned": 41.0}


def test_ranked_top_orders_by_cosine() -> None:
    docs = np.eye(12, dtype=np.float32)
    query = np.zeros((1, 12), dtype=np.float32)
    query[0, 3], query[0, 7] = 0.9, 0.5
    top = bench.ranked_top(docs, query, [f"d{i}" for i in range(12)])
    assert top[0][:2] == ["d3", "d7"] and len(top[0]) == 10


def test_the_section_says_a_capped_run_is_capped() -> None:
    base = {"code": np.array([0.5, 1.0, 0.0]), "heldout": np.array([1.0, 0.5])}
    tuned = {"code": np.array([1.0, 1.0, 0.0]), "heldout": np.array([1.0, 1.0])}
    summary = tune.Summary("all-MiniLM-L6-v2", "abc", pairs_train=15_707, pairs_heldout=1_741)
    summary.steps, summary.train_s, summary.pairs_per_s, summary.workers = (
        20,
        800.0,
        1.6,
        "2 x 1 CPU",
    )
    summary.verdict = ev.gate(base, tuned).as_dict()
    summary.accepted = summary.verdict["accepted"]
    options = tune.TuneOptions(database_url="x", max_steps=40, num_workers=2, freeze_layers=4)
    result = {
        "documents": 8_797,
        "summary": asdict(summary),
        "options": {k: v for k, v in asdict(options).items() if not isinstance(v, tuple)},
        "by_source": "description 8,707, title 8,741",
        "mine_s": 20.0,
        "measured": {"base": 2.0, "tuned": 300.0},
        "job_s": 1500.0,
        "load_train": 3.0,
        "recall": {"base": {"code": 0.5, "heldout": 1.0}, "tuned": {"code": 0.7, "heldout": 1.0}},
    }
    text = bench.docs_section(result, 1.0)
    assert text.startswith(bench.START_MARK) and text.rstrip().endswith(bench.END_MARK)
    assert "8% of one epoch: a run capped by the CPU budget" in text
    assert "the lowest 4 layer(s) frozen" in text
    assert "| code | 3 | 0.5000 | 0.6667 | +0.1667" in text and "| 0.5000 | 0.7000 |" in text
    assert "verdict: **accepted**" in text
