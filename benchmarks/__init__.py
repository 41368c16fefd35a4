"""Benchmarks: `make bench` runs benchmarks.http_bench."""
