"""The evaluation set's settings: where its files and cache are, what it
reads, each source group's quota, the seeds and the query counts."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus.jsonl.gz"
QUERIES = HERE / "queries.jsonl"
CACHE = Path(os.environ.get("SEARCH_EVAL_CACHE", "/tmp/search_eval_cache"))
MAN_ROOT = Path("/usr/share/man")
SITE = Path(sysconfig.get_paths()["purelib"])
STDLIB = Path(sysconfig.get_paths()["stdlib"])
SEED = 20261121

MAX_CONTENT = 1600  # characters of content per document
MIN_CONTENT = 200

# How many documents each source group contributes (after cleaning and dedupe).
MAN_QUOTA = {
    "man1": 1000,
    "gcloud": 250,
    "man2": 330,
    "man3": 650,
    "man4": 30,
    "man5": 180,
    "man7": 380,
    "man8": 380,
}
# Python packages (import name -> quota); "stdlib" is the standard library.
PY_QUOTA = {
    "stdlib": 520,
    "numpy": 110,
    "scipy": 150,
    "torch": 150,
    "sklearn": 110,
    "ray": 90,
    "sqlalchemy": 90,
    "pydantic": 40,
    "aiohttp": 35,
    "fastapi": 20,
    "starlette": 20,
    "PIL": 45,
    "faiss": 10,
    "alembic": 35,
    "psycopg": 35,
    "psycopg_pool": 8,
    "networkx": 70,
    "sympy": 60,
    "transformers": 40,
    "httpx": 15,
    "requests": 15,
    "jinja2": 20,
    "click": 20,
    "yaml": 8,
    "pygments": 12,
    "rich": 20,
    "trio": 30,
    "anyio": 20,
    "uvicorn": 6,
    "websockets": 20,
    "cryptography": 20,
    "jsonschema": 10,
    "huggingface_hub": 25,
    "prometheus_client": 10,
    "psutil": 20,
    "sortedcontainers": 12,
    "urllib3": 20,
    "attr": 10,
    "grpc": 12,
    "fsspec": 20,
    "joblib": 12,
    "mpmath": 20,
    "sentence_transformers": 12,
    "_pytest": 25,
    "pluggy": 6,
    "setuptools": 15,
    "markdown_it": 6,
    "smart_open": 6,
    "multidict": 4,
    "yarl": 4,
    "msgpack": 3,
    "filelock": 3,
    "tqdm": 6,
    "opentelemetry": 10,
    "tokenizers": 4,
    "safetensors": 3,
    "typer": 6,
    "mako": 5,
    "sqlmodel": 4,
    "defusedxml": 4,
    "watchfiles": 4,
    "aiosmtpd": 4,
}
README_QUOTA = 130
STDLIB_SKIP = {
    "test",
    "idlelib",
    "lib2to3",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "site-packages",
    "pydoc_data",
    "distutils",
    "config-3.11-x86_64-linux-gnu",
}
SKIP_DIRS = {"tests", "test", "testing", "_vendor", "vendor", "vendored", "benchmarks", "examples"}

N_PARAPHRASE = 150
N_KEYWORD = 120
DEV_FRACTION = 1 / 3
# Extra dev-only keyword queries (issue 23), appended after the queries above with
# their own seed and "x" query ids; see ``extra_dev``.
EXTRA_SEED = 20261123
N_EXTRA_KEYWORD = 300
