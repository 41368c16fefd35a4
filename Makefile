# The README's two commands: `make run` and `make test`. Both create .venv on
# first use; the install is skipped while pyproject.toml is unchanged (stamp).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.cairn-installed

.PHONY: run test lint typecheck unit bench bench-million clean-state help

help:
	@echo "make run    - install, start Postgres + Ray, serve the API on http://127.0.0.1:8000"
	@echo "make test   - install, then ruff, mypy and the whole pytest suite"
	@echo "make bench  - benchmarks (results in docs/benchmarks.md)"
	@echo "make bench-million - search at a million patterns (hours; resumable)"

$(STAMP): pyproject.toml configs/constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Cairn needs Python 3.11"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, from the CPU build, so nothing below pulls CUDA wheels.
	# pip byte-compiles on one core (100 of the 215 s the install took from a
	# warm wheel cache): compileall does it on every core instead. (Leaving it
	# to the first import cost more: Ray's processes start together and each
	# compiled the same modules.) A file that does not compile (torch ships one
	# in Python 3.12 syntax) is skipped, as pip skips it.
	$(BIN)/python -m pip install --disable-pip-version-check --no-compile -q torch==2.13.0
	$(BIN)/python -m pip install --disable-pip-version-check --no-compile -q -c configs/constraints.txt -e '.[dev]'
	-$(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/cairn run

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The suite's budget: pytest within 12 minutes on 2 cores (README, "The test
# suite and its time budget"); the 20 slowest tests are listed at the end.
test: lint typecheck
	bash scripts/ensure-browser
	bash scripts/ensure-prometheus
	$(BIN)/python -m pytest -n 2 --dist loadscope --durations=20

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

# http_bench installs Debian's wrk and redis-server with apt-get when missing
# (benchmarks/harness/wrk.py, benchmarks/serving/redis_limiter.py).
bench: $(STAMP)
	$(BIN)/python -m benchmarks.http_bench
	$(BIN)/python -m benchmarks.pattern_bench
	$(BIN)/python -m benchmarks.qa_bench
	$(BIN)/python -m benchmarks.page_bench
	$(BIN)/python -m benchmarks.social_bench
	$(BIN)/python -m benchmarks.ranking_eval
	$(BIN)/python -m benchmarks.trust_bench --semantic
	$(BIN)/python -m benchmarks.lexical_bench
	$(BIN)/python -m benchmarks.search_bench
	$(BIN)/python -m benchmarks.encoder_bench
	$(BIN)/python -m benchmarks.embedder_rss
	$(BIN)/python -m benchmarks.replica_bench
	$(BIN)/python -m benchmarks.reembed_bench
	$(BIN)/python -m benchmarks.tune_bench
	$(BIN)/python -m benchmarks.tune_quality_bench
	$(BIN)/python -m benchmarks.stream_bench
	$(BIN)/python -m benchmarks.abuse_bench
	$(BIN)/python -m benchmarks.abuse_bench --surfaces
	$(BIN)/python -m benchmarks.safety_bench
	$(BIN)/python -m benchmarks.rescreen_bench
	$(BIN)/python -m benchmarks.webhook_bench

# Search at a million patterns with real vectors (hours on a small CPU; resumable:
# Ctrl-C keeps what was embedded and a rerun continues). Not part of `make bench`.
# make bench-million [PATTERNS=1000000] [EMBED_DEVICE=auto]
PATTERNS ?= 1000000
EMBED_DEVICE ?= cpu
bench-million: $(STAMP)
	$(BIN)/python -m benchmarks.search_bench --parts search --patterns $(PATTERNS) --embed --embed-device $(EMBED_DEVICE)

clean-state:
	rm -rf .cairn
