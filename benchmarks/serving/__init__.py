"""The parts of ``benchmarks/http_bench.py`` (Ray Serve against plain uvicorn)."""
