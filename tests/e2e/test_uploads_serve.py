"""Image upload and serving through the real service (Serve behind HAProxy; the
images in Postgres, the default store)."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator

import httpx
import psycopg
import pytest
from PIL import Image

from tests.e2e.conftest import Service
from tests.e2e.test_service import auth, register

pytestmark = pytest.mark.e2e

MB = 1024 * 1024
CSP = "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; sandbox"


def noise_png(width: int, height: int) -> bytes:
    """Random pixels: incompressible, about width * height * 3 bytes."""
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(
        out, format="PNG", compress_level=1
    )
    return out.getvalue()


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (40, 30), "#2a6").save(out, format="PNG")
    return out.getvalue()


async def upload(
    http: httpx.AsyncClient, key: str, data: bytes, name: str = "a.png", declared: str = "image/png"
) -> httpx.Response:
    return await http.post("/api/upload", headers=auth(key), files={"file": (name, data, declared)})


def stored_bytes(service: Service, path: str) -> bytes | None:
    """The upload's bytes as Postgres holds them (its chunks in order)."""
    with psycopg.connect(service.database_url) as conn:
        chunks = conn.execute(
            "SELECT c.data FROM upload_chunks c JOIN uploads u ON u.id = c.upload_id"
            " WHERE u.path = %s ORDER BY c.seq",
            (path,),
        ).fetchall()
    return b"".join(bytes(row[0]) for row in chunks) if chunks else None


def assert_json_error(response: httpx.Response, status: int, error: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["error"] == error and body["message"], body


async def test_upload_serve_and_delete_through_serve(
    http: httpx.AsyncClient, service: Service
) -> None:
    agent = await register(http, "Serve Uploader")
    data = png()
    response = await upload(http, agent["api_key"], data, "notes.txt", "text/plain")
    assert response.status_code == 201, response.text
    result = response.json()["data"]
    assert result["contentType"] == "image/png" and result["size"] == len(data)
    assert result["path"].startswith(f"{agent['agent_id']}/")
    assert result["url"] == f"https://cairn.e2e/uploads/{result['path']}"
    assert stored_bytes(service, result["path"]) == data
    assert not (service.state_dir / "uploads").exists()  # nothing on the disk

    # Both ingress replicas serve it (the store is the database).
    for _ in range(4):
        served = await http.get(f"/uploads/{result['path']}")
        assert served.status_code == 200 and served.content == data
        assert served.headers["content-type"] == "image/png"
        assert served.headers["x-content-type-options"] == "nosniff"
        assert served.headers["content-security-policy"] == CSP
        assert "immutable" in served.headers["cache-control"]

    # A larger image (three 256 KiB chunks) is streamed back whole.
    big = noise_png(400, 500)
    response = await upload(http, agent["api_key"], big)
    assert response.status_code == 201, response.text
    big_path = response.json()["data"]["path"]
    for _ in range(4):
        served = await http.get(f"/uploads/{big_path}")
        assert served.status_code == 200 and served.content == big
        assert served.headers["content-length"] == str(len(big))
        assert served.headers["etag"] == f'"{big_path.split("/")[1].split(".")[0]}"'
    assert stored_bytes(service, big_path) == big

    traversal = await http.request(
        "DELETE", "/api/upload", headers=auth(agent["api_key"]), json={"path": "../../etc/passwd"}
    )
    assert_json_error(traversal, 400, "invalid_path")
    assert stored_bytes(service, result["path"]) == data

    deleted = await http.request(
        "DELETE", "/api/upload", headers=auth(agent["api_key"]), json={"path": result["path"]}
    )
    assert deleted.status_code == 200, deleted.text
    assert_json_error(await http.get(f"/uploads/{result['path']}"), 404, "not_found")
    assert stored_bytes(service, result["path"]) is None


async def test_refusals_through_serve(http: httpx.AsyncClient, service: Service) -> None:
    agent = await register(http, "Serve Refused")
    key = agent["api_key"]
    html = b"<!DOCTYPE html><html><body><script>alert(1)</script></body></html>"
    assert_json_error(await upload(http, key, html, "evil.png"), 400, "unsupported_file_type")
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    assert_json_error(await upload(http, key, svg, "a.svg", "image/svg+xml"), 400, "unsafe_svg")
    assert_json_error(
        await http.post("/api/upload", files={"file": ("a.png", png(), "image/png")}),
        401,
        "missing_api_key",
    )

    # 6 MB with a Content-Length: refused before the body is read.
    big = png() + b"\x00" * (6 * MB)
    assert_json_error(await upload(http, key, big), 413, "payload_too_large")

    # 6 MB streamed without a length: refused once the limit is passed.
    boundary = "e2eboundary"

    async def chunked() -> AsyncIterator[bytes]:
        yield (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.png"'
            "\r\nContent-Type: image/png\r\n\r\n"
        ).encode() + png()
        for _ in range(96):
            yield b"\x00" * 65536
        yield f"\r\n--{boundary}--\r\n".encode()

    streamed = await http.post(
        "/api/upload",
        headers={**auth(key), "content-type": f"multipart/form-data; boundary={boundary}"},
        content=chunked(),
    )
    assert_json_error(streamed, 413, "payload_too_large")

    with psycopg.connect(service.database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM uploads WHERE agent_id = %s", (agent["agent_id"],)
        ).fetchone()
    assert row is not None and row[0] == 0
    # The service still answers on the same client after the refusals.
    assert (await http.get("/api/health")).status_code == 200
