"""Serving an uploaded image from each store: the app in process (no Ray, no
HTTP server), one reader, over the embedded test Postgres.

    .venv/bin/python -m benchmarks.uploads_bench [--reads 40]

Prints the median and p90 milliseconds of ``GET /uploads/…`` for images of
about 20 KB, 600 KB and 4.5 MB, stored in Postgres (256 KiB chunks, and 1 MiB
for comparison) and on the local disk (docs/benchmarks.md, "Upload reads").
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from PIL import Image

from serve_app.app import create_app
from serve_app.settings import Settings
from storage.embedded import database_url, drop_database, ensure_database, start_server
from storage.files import FileStore, LocalFileStore, PostgresFileStore
from storage.migrate import upgrade
from storage.seed import seed_categories

REPO = Path(__file__).resolve().parents[1]


def noise_png(width: int, height: int) -> bytes:
    """Random pixels: incompressible, about width * height * 3 bytes."""
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(
        out, format="PNG", compress_level=1
    )
    return out.getvalue()


async def run(reads: int) -> None:
    admin = start_server(REPO / ".cairn" / "test")
    name = f"cairn_bench_{secrets.token_hex(3)}"
    ensure_database(admin, name)
    url = database_url(admin, name)
    upgrade(url)
    seed_categories(url)
    folder = Path(tempfile.mkdtemp(prefix="cairn-uploads-bench-"))
    try:
        settings = Settings(
            public_base_url="https://bench.example",
            state_dir=str(folder / "state"),
            ratelimit_general="1000000/hour",
            ratelimit_anon_read="1000000/hour",
            ratelimit_upload="100000/hour",
        )
        app = create_app(settings, database_url=url, secret=b"bench" * 8, pool_size=5)
        stores: list[tuple[str, FileStore | PostgresFileStore]] = [
            ("postgres, 256 KiB chunks", PostgresFileStore()),
            ("postgres, 1 MiB chunks", PostgresFileStore(1 << 20)),
            ("local disk", LocalFileStore(folder / "uploads")),
        ]
        images = [noise_png(80, 80), noise_png(400, 500), noise_png(1200, 1250)]
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app, client=("203.0.113.9", 1))
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
                response = await client.post("/api/agents/register", json={"name": "Bench"})
                key = response.json()["data"]["api_key"]
                print("| Store | Image | median ms | p90 ms |\n|---|---:|---:|---:|")
                for label, store in stores:
                    app.state.ctx.files = store
                    for data in images:
                        response = await client.post(
                            "/api/upload",
                            headers={"Authorization": f"Bearer {key}"},
                            files={"file": ("a.png", data, "image/png")},
                        )
                        assert response.status_code == 201, response.text
                        path = response.json()["data"]["path"]
                        for _ in range(3):  # warm the pool and the caches
                            await client.get(f"/uploads/{path}")
                        times = []
                        for _ in range(reads):
                            t0 = time.perf_counter()
                            served = await client.get(f"/uploads/{path}")
                            times.append((time.perf_counter() - t0) * 1000)
                            assert served.status_code == 200 and served.content == data
                        times.sort()
                        print(
                            f"| {label} | {len(data) / 1000:,.0f} KB | "
                            f"{statistics.median(times):.1f} | {times[int(len(times) * 0.9)]:.1f} |"
                        )
    finally:
        drop_database(admin, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=40, help="reads per image (40)")
    args = parser.parse_args()
    asyncio.run(run(args.reads))
    print(f"1-minute load average after the run: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
