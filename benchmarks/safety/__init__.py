"""The labelled set of ``benchmarks/safety_bench.py`` and tests/unit/test_screening.py."""
