"""The Embedder replica's RSS and PSS under ``cairn run``, per backend, after
a bulk embed and 40 new queries (docs/benchmarks.md, by hand).

    .venv/bin/python -m benchmarks.embedder_rss --backends torch,onnx
"""

from __future__ import annotations

import argparse
import shutil
import time
from typing import Any

from benchmarks.harness import ROOT, api_call, http_json, new_agent, serve_running, server_env
from benchmarks.serving.processes import process_kind, process_tree

STATE_DIR = ROOT / ".cairn" / "bench-rss"
PORT = 8199
PATTERN = {
    "title": "Retry flaky HTTP calls with backoff",
    "description": "Exponential backoff with jitter for unreliable APIs.",
    "content": "Wrap the request, back off exponentially, add jitter, cap the retries at five.",
}


def embedder_memory(server: Any) -> list[tuple[int, int]]:
    """(RSS, PSS) in MiB of each Embedder replica of the server."""
    out = []
    for proc in process_tree(server.proc.pid):
        if process_kind(proc) == "Embedder replica":
            info = proc.memory_full_info()
            out.append((round(info.rss / 2**20), round(info.pss / 2**20)))
    return out


def measure(backend: str) -> None:
    settings = {"CAIRN_STATE_DIR": str(STATE_DIR), "CAIRN_EMBEDDING_BACKEND": backend}
    env = server_env({**settings, "CAIRN_HOST": "127.0.0.1"})
    with serve_running(PORT, env, STATE_DIR) as serve:
        base = serve.base
        key = new_agent(base, f"Rss {backend} {time.time():.0f}")["api_key"]
        pattern = {**PATTERN, "title": f"{PATTERN['title']} {time.time():.0f}"}
        api_call(base, "POST", "/api/patterns", key, pattern)
        time.sleep(8)  # the worker embeds it
        bulk = embedder_memory(serve)
        for i in range(40):
            path = f"/api/search?q=retry+flaky+calls+{i}&type=patterns"
            status, body = http_json("GET", base + path, timeout=30)
            if status != 200:
                raise SystemExit(f"search answered {status}: {body}")
        time.sleep(3)
        print(
            f"bench: {backend}: Embedder replica (RSS, PSS) MiB after the publish {bulk}, "
            f"after 40 new queries {embedder_memory(serve)} (mode {body.get('mode')})",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="torch,onnx", help="CAIRN_EMBEDDING_BACKEND values")
    args = parser.parse_args(argv)
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    STATE_DIR.mkdir(parents=True)
    models = ROOT / ".cairn" / "models"
    if models.is_dir():
        shutil.copytree(models, STATE_DIR / "models")
    for backend in args.backends.split(","):
        measure(backend)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
