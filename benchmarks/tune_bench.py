"""What one CPU worker of ``cairn tune`` costs: training pairs per second per
core and the worker's memory (docs/benchmarks.md, "Tuning cost on the CPU").

The pairs are real ones, mined as ``--extra python-packages`` mines them
(docstring -> function without its docstring) from the installed packages;
each step is the worker's own (``embeddings.tune``: the weighted in-batch
loss, AdamW, gradients clipped at 1, texts cut at ``--max-tokens``), run in
this process with torch on 1 thread and on every core. The Ray Train
harness around it (one worker: no gradient exchange) is left out: its
start-up is a fixed cost, not a per-pair one.

    .venv/bin/python -m benchmarks.tune_bench [--steps 8] [--batch-size 32] [--no-docs]
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from benchmarks.harness.results import publish, rss_mib, section_end, section_head
from embeddings.pairs import Pair

START_MARK = "<!-- tune-bench:start -->"
END_MARK = "<!-- tune-bench:end -->"
WARMUP_STEPS = 2


def measure(threads: int, pairs: list[Pair], steps: int, batch_size: int, max_tokens: int) -> float:
    """Pairs per second of ``steps`` training steps on ``threads`` threads."""
    import torch
    from sentence_transformers import SentenceTransformer

    from embeddings.config import DEFAULT_MODEL
    from embeddings.encoder import resolve
    from embeddings.tune import weighted_mnr_loss

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = SentenceTransformer(resolve(DEFAULT_MODEL), device="cpu")
    model.max_seq_length = max_tokens
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    model.train()

    def embed(texts: list[str]) -> torch.Tensor:
        return model(model.tokenize(texts))["sentence_embedding"]

    elapsed = 0.0
    for step in range(WARMUP_STEPS + steps):
        batch = pairs[(step * batch_size) % len(pairs) :][:batch_size]
        t0 = time.perf_counter()
        weights = torch.tensor([p.weight for p in batch])
        loss = weighted_mnr_loss(
            embed([p.query for p in batch]), embed([p.document for p in batch]), weights, 20.0
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step >= WARMUP_STEPS:
            elapsed += time.perf_counter() - t0
    return steps * batch_size / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    from embeddings import evaluation
    from embeddings import pairs as mining

    root = evaluation.default_eval_dir()
    excluded = mining.eval_packages([root, root / "code", root / "params"])
    t0 = time.perf_counter()
    need = (WARMUP_STEPS + args.steps) * args.batch_size
    pairs = mining.python_package_pairs(excluded, need, seed=0)
    mine_s = time.perf_counter() - t0
    cores = len(os.sched_getaffinity(0))
    rss_before = rss_mib()
    rows, peak_mib = [], 0.0
    for threads in sorted({1, cores}):
        rate = measure(threads, pairs, args.steps, args.batch_size, args.max_tokens)
        rows.append((threads, rate))
        if not peak_mib:
            # One worker's peak: the first model trained (the process's peak
            # resident set, KiB on Linux); later runs add their own models.
            peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines = section_head(START_MARK, "tune_bench.py", load)
    lines += [
        f"- {len(pairs):,} pairs mined from installed packages in {mine_s:.1f}s; "
        f"batches of {args.batch_size}, texts cut at {args.max_tokens} tokens, "
        f"{args.steps} timed steps after {WARMUP_STEPS} warm-up steps",
        f"- A worker's memory: {peak_mib:,.0f} MiB peak resident set while training on one "
        f"thread ({rss_before:,.0f} MiB before torch and the model were loaded)",
        "",
        "| torch threads | pairs/s | pairs/s per core | 100,000 pairs |",
        "|---:|---:|---:|---:|",
    ]
    for threads, rate in rows:
        lines.append(
            f"| {threads} | {rate:,.1f} | {rate / threads:,.1f} | {100_000 / rate / 60:,.0f} min |"
        )
    publish(
        section_end(lines, "`.venv/bin/python -m benchmarks.tune_bench`", END_MARK),
        START_MARK,
        END_MARK,
        no_docs=args.no_docs,
    )


if __name__ == "__main__":
    main()
