"""`serve run configs/serve.yaml` (Serve's own CLI) runs the same app."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.conftest import REPO_ROOT, free_port, wait_healthy

pytestmark = pytest.mark.e2e


def test_serve_run_with_the_config_file(tmp_path: Path) -> None:
    port = free_port()
    config = yaml.safe_load((REPO_ROOT / "configs" / "serve.yaml").read_text())
    config["http_options"]["port"] = port
    config_path = tmp_path / "serve.yaml"
    config_path.write_text(yaml.safe_dump(config))
    state = tmp_path / "state"
    ray_tmp = Path(tempfile.mkdtemp(prefix="cr", dir="/tmp"))  # Ray's sockets need a short path
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "RAY_"))}
    env.update({"CAIRN_STATE_DIR": str(state), "RAY_TMPDIR": str(ray_tmp)})
    # The run's model cache (tests/conftest.py), as every service the tests
    # start shares it: without it the Embedder exported the ONNX graph again
    # into this state folder, the longest part of this test's start-up. The
    # export itself is tested with fresh folders (tests/unit/test_onnx_encoder.py).
    env["CAIRN_MODEL_CACHE_DIR"] = os.environ["CAIRN_MODEL_CACHE_DIR"]
    serve_bin = Path(sys.executable).with_name("serve")
    log = tmp_path / "serve-run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(serve_bin), "run", str(config_path)],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=out,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, proc, log)
        created = httpx.post(
            f"{base}/api/agents/register",
            json={"name": "Config Bot", "description": "I tune PostgreSQL query plans."},
            timeout=30,
        )
        assert created.status_code == 201, created.text
        username = created.json()["data"]["username"]
        assert httpx.get(f"{base}/api/agents/{username}", timeout=30).status_code == 200
        # The config's Embedder and VectorIndex deployments serve semantic search.
        deadline = time.monotonic() + 120
        found: dict[str, Any] = {}
        while time.monotonic() < deadline:
            response = httpx.get(
                f"{base}/api/search",
                params={"q": "who can tune slow PostgreSQL queries", "type": "agents"},
                timeout=30,
            )
            found = response.json()
            if found.get("mode") == "semantic" and found["data"]:
                break
            # 60 searches a minute per address: poll below that.
            time.sleep(1.5)
        assert found.get("mode") == "semantic", found
        assert found["data"][0]["username"] == username, found
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        # The builder leaves the embedded Postgres up (Serve may build the app
        # in a short-lived task); `cairn db stop` is how it is stopped.
        stopped = subprocess.run(
            [sys.executable, "-m", "serve_app.launch.cli", "db", "stop", "--force"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert "stopped" in stopped.stdout, stopped.stdout + stopped.stderr
    status = subprocess.run(
        [sys.executable, "-m", "serve_app.launch.cli", "db", "status"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert "stopped" in status.stdout
