"""The ranking benchmarks' parts (``ranking_eval``, ``trust_bench``)."""
