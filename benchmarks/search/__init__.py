"""The parts of ``benchmarks/search_bench.py``."""
