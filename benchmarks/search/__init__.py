"""The parts of ``benchmarks/search_bench.py`` (the Embedder's throughput,
/api/search latency at 100,000 patterns, the vector index's memory and
recall)."""
