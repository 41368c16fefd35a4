"""The labelled evaluation set (``benchmarks/search_eval``) as the ranking
benchmarks read it: documents, queries, MRR@10 and Recall@10, the off-topic
queries, and the marks of the "Search ranking quality" section (written by
``ranking_eval``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT

DATA = ROOT / "benchmarks" / "search_eval"
STATE = Path(os.environ.get("CAIRN_RANKING_BENCH_DIR", "/tmp/cairn-ranking-bench"))
START_MARK = "<!-- ranking-bench:start -->"
END_MARK = "<!-- ranking-bench:end -->"

TOP = 10  # MRR@10, Recall@10


# Queries that no document answers: the hybrid should return (almost) nothing.
NONSENSE = ["purple elephant banana recipe", "best chocolate cake for a birthday party",
            "who won the football world cup", "knitting patterns for a winter scarf",
            "horoscope for taurus this week", "how to train a parrot to talk",
            "cheap flights to lisbon in may", "lyrics of a famous love song", "qwzx blorf vranth",
            "gardening tips for tomatoes"]  # fmt: skip


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    relevant: frozenset[int]
    style: str
    split: str


def embed_text(doc: dict[str, Any]) -> str:
    """What production embeds for a pattern."""
    return f"{doc['title']}\n{doc['description']}\n{doc['content']}"


@dataclass
class Score:
    mrr: float
    recall: float
    n: int


def evaluate(ranked: Sequence[Sequence[int]], queries: Sequence[Query]) -> Score:
    rr, rec = 0.0, 0.0
    for keys, q in zip(ranked, queries, strict=True):
        top = list(keys)[:TOP]
        first = next((i for i, k in enumerate(top) if k in q.relevant), None)
        rr += 0.0 if first is None else 1.0 / (first + 1)
        rec += len(q.relevant & set(top)) / len(q.relevant)
    n = len(queries)
    return Score(rr / n if n else 0.0, rec / n if n else 0.0, n)
