"""The "plain uvicorn" side of benchmarks.http_bench: the same app, one process.

Prepares the state folder and database exactly as ``cairn run`` does, builds the
app with the default in-process rate limiter and serves it with one uvicorn
worker. Settings come from the CAIRN_* environment (the benchmark sets them).

    python -m benchmarks.uvicorn_app --host 127.0.0.1 --port 8101
"""

from __future__ import annotations

import argparse
import logging

import uvicorn

from serve_app.app import create_app
from serve_app.bootstrap import prepare
from serve_app.settings import get_settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8101)
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.WARNING)
    settings = get_settings().model_copy(update={"host": args.host, "port": args.port})
    prepared = prepare(settings)
    app = create_app(
        settings,
        database_url=prepared.database_url,
        # The bytes Serve replicas use: settings.secret_bytes() == CAIRN_SECRET_KEY.encode().
        secret=prepared.secret_key.encode(),
    )
    print(f"uvicorn_app: serving on http://{args.host}:{args.port}", flush=True)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        workers=1,
        log_level="warning",
        access_log=False,
        proxy_headers=False,
    )


if __name__ == "__main__":
    main()
