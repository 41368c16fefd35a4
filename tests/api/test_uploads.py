"""Image upload, serving and deletion (over real Postgres and a real disk)."""

from __future__ import annotations

import io
import os
import struct
import uuid
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import psycopg
import pytest
from PIL import Image

from serve_app.kit.images import MAX_PIXELS
from storage.db import libpq_url
from tests.api.conftest import Registered, StoreProbe, assert_error, register, scalar

MB = 1024 * 1024
LIMIT = 5 * MB
CSP = "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; sandbox"
SVG = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"'
    b' width="40" height="40" viewBox="0 0 40 40">'
    b'<defs><linearGradient id="g"><stop offset="0" stop-color="#08f"/></linearGradient></defs>'
    b"<style>circle { stroke: #123; }</style>"
    b'<circle id="c" cx="20" cy="20" r="18" fill="url(#g)" style="opacity: .9"/>'
    b'<use xlink:href="#c" transform="scale(.5)"/>'
    b'<a href="#c"><text x="2" y="38">Cairn &amp; co</text></a></svg>'
)


def image_bytes(fmt: str, size: tuple[int, int] = (48, 32), mode: str = "RGB") -> bytes:
    image = Image.new(mode, size, "#3a7" if mode != "1" else 0)
    for x in range(min(size)):
        image.putpixel((x, x), (200, 20, 20) if mode == "RGB" else 1)
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def noise_png(width: int, height: int) -> bytes:
    """A PNG of random pixels (incompressible: the file is about width*height*3 bytes)."""
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(
        out, format="PNG", compress_level=1
    )
    return out.getvalue()


def gif_with_a_later_frame(width: int, height: int) -> bytes:
    """A 1x1 GIF whose second frame declares ``width`` x ``height``."""
    screen = b"GIF89a" + struct.pack("<HH", 1, 1) + b"\x80\x00\x00" + b"\x00\x00\x00\xff\xff\xff"

    def frame(w: int, h: int) -> bytes:
        return b"\x2c" + struct.pack("<HHHH", 0, 0, w, h) + b"\x00" + b"\x02\x02\x44\x01\x00"

    return screen + frame(1, 1) + frame(width, height) + b"\x3b"


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_declaring(width: int, height: int) -> bytes:
    """A tiny PNG whose header declares ``width`` x ``height`` 1-bit pixels."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", idat)
        + png_chunk(b"IEND", b"")
    )


FORMATS = [
    ("PNG", "image/png", "png"),
    ("JPEG", "image/jpeg", "jpg"),
    ("GIF", "image/gif", "gif"),
    ("WEBP", "image/webp", "webp"),
]


def on_disk(store: StoreProbe) -> list[str]:
    """The paths the store holds bytes for (files on disk, or chunk rows)."""
    return store.paths()


def rows(database: str) -> int:
    return int(scalar(database, "SELECT count(*) FROM uploads"))


async def send(
    client: httpx.AsyncClient,
    agent: Registered | None,
    data: bytes,
    filename: str = "image",
    content_type: str = "application/octet-stream",
    field: str = "file",
) -> httpx.Response:
    return await client.post(
        "/api/upload",
        headers=agent.auth if agent else {},
        files={field: (filename, data, content_type)},
    )


async def uploaded(client: httpx.AsyncClient, agent: Registered, data: bytes) -> dict[str, Any]:
    response = await send(client, agent, data)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()["data"]
    return result


def served_path(result: dict[str, Any]) -> str:
    return f"/uploads/{result['path']}"


async def assert_served(
    client: httpx.AsyncClient, path: str, data: bytes, content_type: str
) -> None:
    response = await client.get(path)
    assert response.status_code == 200, response.text
    assert response.content == data
    assert response.headers["content-type"] == content_type
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-security-policy"] == CSP
    assert "immutable" in response.headers["cache-control"]
    assert "max-age=31536000" in response.headers["cache-control"]
    assert response.headers["vary"] == "Authorization"


def assert_nothing_stored(database: str, store: StoreProbe) -> None:
    assert rows(database) == 0
    assert on_disk(store) == []


# --- accepted -------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "content_type", "ext"), FORMATS)
async def test_each_raster_type_is_stored_and_served_back(
    client: httpx.AsyncClient,
    database: str,
    store: StoreProbe,
    fmt: str,
    content_type: str,
    ext: str,
) -> None:
    agent = await register(client, "Uploader")
    data = image_bytes(fmt)
    response = await send(client, agent, data, f"picture.{ext}", content_type)
    assert response.status_code == 201, response.text
    body = response.json()
    assert isinstance(body["message"], str) and body["message"]
    result = body["data"]
    assert set(result) == {"url", "path", "size", "contentType"}
    assert result["path"].startswith(f"{agent.agent_id}/") and result["path"].endswith(f".{ext}")
    assert result["url"] == f"https://cairn.example/uploads/{result['path']}"
    assert (result["size"], result["contentType"]) == (len(data), content_type)
    assert on_disk(store) == [result["path"]]
    assert store.read(result["path"]) == data
    assert scalar(database, "SELECT content_type FROM uploads WHERE path = %s", result["path"]) == (
        content_type
    )
    await assert_served(client, served_path(result), data, content_type)


async def test_svg_is_stored_and_served_back(client: httpx.AsyncClient, store: StoreProbe) -> None:
    agent = await register(client, "Drawer")
    result = await uploaded(client, agent, SVG)
    assert result["contentType"] == "image/svg+xml" and result["path"].endswith(".svg")
    await assert_served(client, served_path(result), SVG, "image/svg+xml")
    # An SVG without the namespace, prefixed SVG, and an editor's metadata are fine too.
    for svg in (
        b'<svg width="1" height="1"><rect width="1" height="1"/></svg>',
        b'<s:svg xmlns:s="http://www.w3.org/2000/svg"><s:rect width="1" height="1"/></s:svg>',
        b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:inkscape="http://www.inkscape.org/ns"'
        b' inkscape:export-filename="C:\\Users\\me\\a.png"><!-- made by hand --><g/></svg>',
    ):
        assert (await uploaded(client, agent, svg))["contentType"] == "image/svg+xml"


async def test_declared_type_and_name_are_ignored(
    client: httpx.AsyncClient, database: str, store: StoreProbe
) -> None:
    agent = await register(client, "Liar")
    png = image_bytes("PNG")
    response = await send(client, agent, png, "x.txt", "text/plain")
    assert response.status_code == 201, response.text
    result = response.json()["data"]
    assert result["contentType"] == "image/png" and result["path"].endswith(".png")
    await assert_served(client, served_path(result), png, "image/png")

    jpeg = image_bytes("JPEG")
    result = (await send(client, agent, jpeg, "photo.png", "image/png")).json()["data"]
    assert result["contentType"] == "image/jpeg" and result["path"].endswith(".jpg")
    assert rows(database) == 2 and len(on_disk(store)) == 2


async def test_html_named_png_is_refused_and_nothing_stored(
    client: httpx.AsyncClient, database: str, store: StoreProbe
) -> None:
    agent = await register(client, "Sneaky")
    html = b"<!DOCTYPE html><html><body><script>alert(document.cookie)</script></body></html>"
    response = await send(client, agent, html, "evil.png", "image/png")
    assert_error(response, 400, "unsupported_file_type")
    for other in (b"GIF88a not really", b"hello world", b"%PDF-1.7\n", b"RIFF\x00\x00\x00\x00AVI "):
        assert_error(await send(client, agent, other, "a.gif", "image/gif"), 400)
    assert_nothing_stored(database, store)


async def test_a_file_near_the_limit_is_accepted(
    client: httpx.AsyncClient, store: StoreProbe
) -> None:
    agent = await register(client, "Big")
    data = noise_png(1270, 1270)
    assert 4.5 * MB < len(data) <= LIMIT
    result = await uploaded(client, agent, data)
    assert result["size"] == len(data)
    await assert_served(client, served_path(result), data, "image/png")


# --- refused --------------------------------------------------------------


async def test_six_megabytes_is_413_and_nothing_stored(
    client: httpx.AsyncClient, database: str, store: StoreProbe
) -> None:
    agent = await register(client, "Too Big")
    data = image_bytes("PNG") + b"\x00" * (6 * MB)
    response = await send(client, agent, data, "big.png", "image/png")
    assert_error(response, 413, "payload_too_large")
    assert_nothing_stored(database, store)


async def test_over_the_limit_without_content_length_stops_reading(
    client: httpx.AsyncClient, database: str, store: StoreProbe
) -> None:
    """A chunked body: no length to refuse up front, so the parser stops at the limit."""
    agent = await register(client, "Streamer")
    boundary = "cairnboundary"
    sent = 0
    total_chunks = 200  # 200 x 64 KiB = 12.5 MiB of file

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.png"'
            "\r\nContent-Type: image/png\r\n\r\n"
        ).encode()
        yield head + image_bytes("PNG")
        for _ in range(total_chunks):
            sent += 1
            yield b"\x00" * 65536
        yield f"\r\n--{boundary}--\r\n".encode()

    response = await client.post(
        "/api/upload",
        headers={**agent.auth, "content-type": f"multipart/form-data; boundary={boundary}"},
        content=body(),
    )
    assert_error(response, 413, "payload_too_large")
    # It stopped asking for the body just past the limit.
    assert sent * 65536 <= LIMIT + 2 * 65536
    assert_nothing_stored(database, store)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(image_bytes("PNG", (8000, 6000), mode="1"), id="48-megapixels"),
        pytest.param(png_declaring(12_000, 12_000), id="144-megapixels-warning"),
        pytest.param(png_declaring(100_000, 100_000), id="10-gigapixels"),
        # A small first frame does not hide a huge later one.
        pytest.param(gif_with_a_later_frame(8000, 8000), id="gif-64-megapixels-second-frame"),
    ],
)
async def test_decompression_bombs_are_refused(
    client: httpx.AsyncClient, database: str, store: StoreProbe, data: bytes
) -> None:
    agent = await register(client, "Bomber")
    assert len(data) < 100_000
    body = assert_error(await send(client, agent, data), 400, "invalid_image")
    assert f"{MAX_PIXELS:,}" in body["message"]
    assert_nothing_stored(database, store)


async def test_broken_images_are_refused(
    client: httpx.AsyncClient, database: str, store: StoreProbe
) -> None:
    agent = await register(client, "Breaker")
    png = image_bytes("PNG", (64, 64))
    corrupt = bytearray(png)
    idat = png.index(b"IDAT")
    corrupt[idat + 6] ^= 0xFF  # the CRC no longer matches
    jpeg = image_bytes("JPEG", (256, 256))
    gif = image_bytes("GIF", (64, 64))
    webp = image_bytes("WEBP", (64, 64))
    for broken in (
        png[: len(png) // 2],
        bytes(corrupt),
        png[:8],
        jpeg[: len(jpeg) // 2],
        gif[:40],
        webp[:30],
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 100,
    ):
        assert_error(await send(client, agent, broken, "ok.png", "image/png"), 400, "invalid_image")
    assert_nothing_stored(database, store)


SVG_OPEN = b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'


@pytest.mark.parametrize(
    "svg",
    [
        pytest.param(SVG_OPEN + b"<script>alert(1)</script></svg>", id="script"),
        pytest.param(
            SVG_OPEN + b'<script xlink:href="https://evil.example/x.js"/></svg>', id="ext-script"
        ),
        pytest.param(
            b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><rect/></svg>', id="onload"
        ),
        pytest.param(SVG_OPEN + b'<rect ONCLICK="alert(1)"/></svg>', id="onclick-upper"),
        pytest.param(
            b'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY x "lol">]>'
            b'<svg xmlns="http://www.w3.org/2000/svg"><text>&x;</text></svg>',
            id="doctype-entity",
        ),
        pytest.param(
            b'<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/'
            b'DTD/svg11.dtd"><svg xmlns="http://www.w3.org/2000/svg"/>',
            id="doctype-external",
        ),
        pytest.param(
            SVG_OPEN + b"<foreignObject><div xmlns='http://www.w3.org/1999/xhtml'>x</div>"
            b"</foreignObject></svg>",
            id="foreignObject",
        ),
        pytest.param(
            SVG_OPEN + b'<a xlink:href="javascript:alert(1)"><rect/></a></svg>', id="js-href"
        ),
        pytest.param(
            SVG_OPEN + b'<a href=" jav&#x09;ascript:alert(1)"><rect/></a></svg>', id="js-obfuscated"
        ),
        pytest.param(
            SVG_OPEN + b'<a href="data:text/html,&lt;script&gt;alert(1)&lt;/script&gt;"/></svg>',
            id="data-html",
        ),
        pytest.param(
            SVG_OPEN + b'<image href="https://evil.example/track.png"/></svg>', id="external-image"
        ),
        pytest.param(SVG_OPEN + b'<use xlink:href="other.svg#x"/></svg>', id="external-use"),
        pytest.param(
            SVG_OPEN + b"<style>@import url(https://evil.example/a.css);</style></svg>",
            id="css-import",
        ),
        pytest.param(
            # After a child element the text is that child's tail; it is CSS all the same.
            SVG_OPEN + b"<style>rect{}<desc/>@import url(https://evil.example/a.css);</style>"
            b"<rect/></svg>",
            id="css-after-a-child",
        ),
        pytest.param(
            SVG_OPEN + b'<rect style="fill: url(https://evil.example/p.svg#p)"/></svg>',
            id="css-external-url",
        ),
        pytest.param(
            b'<?xml-stylesheet href="https://evil.example/a.css"?>'
            b'<svg xmlns="http://www.w3.org/2000/svg"/>',
            id="xml-stylesheet",
        ),
        pytest.param(
            SVG_OPEN + b'<a><set attributeName="href" to="javascript:alert(1)"/></a></svg>',
            id="animated-href",
        ),
        pytest.param(SVG_OPEN + b'<iframe src="https://evil.example"/></svg>', id="iframe"),
    ],
)
async def test_unsafe_svg_is_refused(
    client: httpx.AsyncClient, database: str, store: StoreProbe, svg: bytes
) -> None:
    agent = await register(client, "Scripter")
    assert_error(await send(client, agent, svg, "a.svg", "image/svg+xml"), 400, "unsafe_svg")
    assert_nothing_stored(database, store)


async def test_xml_that_is_not_svg_is_unsupported(
    client: httpx.AsyncClient, store: StoreProbe
) -> None:
    agent = await register(client, "Xml")
    for xml in (
        b'<html xmlns="http://www.w3.org/1999/xhtml"><body>hi</body></html>',
        b'<svg xmlns="http://example.com/not-svg"/>',
        b'<?xml version="1.0"?><note><to>you</to></note>',
    ):
        assert_error(await send(client, agent, xml), 400, "unsupported_file_type")
    # An SVG that is not well-formed XML is a broken image; so is one too
    # complex to parse in reasonable time.
    bad = b'<svg xmlns="http://www.w3.org/2000/svg"><g></svg>'
    assert_error(await send(client, agent, bad), 400, "invalid_image")
    huge = b'<svg xmlns="http://www.w3.org/2000/svg">' + b"<g/>" * 250_000 + b"</svg>"
    assert_error(await send(client, agent, huge), 400, "invalid_image")
    assert on_disk(store) == []


async def test_upload_needs_a_key(
    client: httpx.AsyncClient, database: str, store: StoreProbe
) -> None:
    assert_error(await send(client, None, image_bytes("PNG")), 401)
    response = await client.post(
        "/api/upload",
        headers={"Authorization": "Bearer cairn_wrong"},
        files={"file": ("a.png", image_bytes("PNG"), "image/png")},
    )
    assert_error(response, 401, "invalid_api_key")
    assert_nothing_stored(database, store)


async def test_malformed_requests_are_400(
    client: httpx.AsyncClient, database: str, store: StoreProbe
) -> None:
    agent = await register(client, "Sloppy")
    png = image_bytes("PNG")
    assert_error(await send(client, agent, png, field="image"), 400, "missing_file")
    assert_error(await send(client, agent, b""), 400, "empty_file")
    form_only = await client.post("/api/upload", headers=agent.auth, files={"name": (None, b"x")})
    assert_error(form_only, 400, "missing_file")
    urlencoded = await client.post("/api/upload", headers=agent.auth, data={"file": "x"})
    assert_error(urlencoded, 415, "unsupported_media_type")
    as_json = await client.post("/api/upload", headers=agent.auth, json={"file": "aGk="})
    assert_error(as_json, 415, "unsupported_media_type")
    two = await client.post(
        "/api/upload",
        headers=agent.auth,
        files=[("file", ("a.png", png, "image/png")), ("file", ("b.png", png, "image/png"))],
    )
    assert_error(two, 400, "invalid_multipart")
    truncated = await client.post(
        "/api/upload",
        headers={**agent.auth, "content-type": "multipart/form-data; boundary=xyz"},
        content=b'--xyz\r\nContent-Disposition: form-data; name="file"\r\n\r\n' + png,
    )
    assert_error(truncated, 400, "invalid_multipart")
    no_boundary = await client.post(
        "/api/upload",
        headers={**agent.auth, "content-type": "multipart/form-data"},
        content=png,
    )
    assert_error(no_boundary, 400, "invalid_multipart")
    assert_nothing_stored(database, store)

    # Other fields next to the file are ignored.
    response = await client.post(
        "/api/upload",
        headers=agent.auth,
        data={"caption": "x" * 1000},
        files={"file": ("a.png", png, "image/png")},
    )
    assert response.status_code == 201, response.text


# --- a transaction that fails leaves no file --------------------------------


@pytest.fixture
def failing_uploads(database: str) -> Iterator[Any]:
    """Make Postgres refuse upload rows, on insert or only at commit."""
    url = libpq_url(database)

    def install(at_commit: bool) -> None:
        when = "DEFERRABLE INITIALLY DEFERRED" if at_commit else ""
        with psycopg.connect(url) as conn:
            conn.execute(
                "CREATE OR REPLACE FUNCTION cairn_test_refuse() RETURNS trigger "
                "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by test'; END $$"
            )
            conn.execute(
                f"CREATE CONSTRAINT TRIGGER cairn_test_refuse AFTER INSERT ON uploads {when} "
                "FOR EACH ROW EXECUTE FUNCTION cairn_test_refuse()"
            )

    yield install
    with psycopg.connect(url) as conn:
        conn.execute("DROP TRIGGER IF EXISTS cairn_test_refuse ON uploads")
        conn.execute("DROP FUNCTION IF EXISTS cairn_test_refuse()")


@pytest.mark.parametrize("at_commit", [False, True], ids=["on-insert", "at-commit"])
async def test_a_failed_transaction_removes_the_file(
    client: httpx.AsyncClient,
    database: str,
    store: StoreProbe,
    failing_uploads: Any,
    at_commit: bool,
) -> None:
    agent = await register(client, "Unlucky")
    failing_uploads(at_commit)
    # A 500 is also re-raised to the server (to log it): this client only looks at the answer.
    transport = httpx.ASGITransport(
        app=client._transport.app,  # type: ignore[attr-defined]
        raise_app_exceptions=False,
    )
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as plain:
        response = await send(plain, agent, image_bytes("PNG"))
    assert_error(response, 500, "internal_error")
    assert_nothing_stored(database, store)


# --- deleting -------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "..\\..\\etc\\passwd",
        "{agent}/../../../etc/passwd",
        "{agent}/{name}/../{name}",
        "{agent}\\{name}",
        "/{agent}/{name}",
        "{agent}/{name}.html",
        "{agent}",
        "",
        "{AGENT}/{name}",
        "{agent}/" + "a" * 5000 + ".png",
    ],
)
async def test_delete_refuses_malformed_paths(
    client: httpx.AsyncClient, database: str, store: StoreProbe, path: str
) -> None:
    agent = await register(client, "Careful")
    result = await uploaded(client, agent, image_bytes("PNG"))
    name = result["path"].split("/")[1]
    path = path.format(agent=agent.agent_id, AGENT=agent.agent_id.upper(), name=name)
    response = await client.request(
        "DELETE", "/api/upload", headers=agent.auth, json={"path": path}
    )
    assert_error(response, 400, "invalid_path")
    assert rows(database) == 1 and on_disk(store) == [result["path"]]


async def test_delete_is_for_the_owner(
    client: httpx.AsyncClient, database: str, store: StoreProbe, roomy_registration: None
) -> None:
    owner = await register(client, "Owner")
    other = await register(client, "Other")
    result = await uploaded(client, owner, image_bytes("GIF"))
    forbidden = await client.request(
        "DELETE", "/api/upload", headers=other.auth, json={"path": result["path"]}
    )
    assert_error(forbidden, 403)
    assert rows(database) == 1 and on_disk(store) == [result["path"]]
    unknown = f"{owner.agent_id}/{'0' * 32}.gif"
    missing = await client.request(
        "DELETE", "/api/upload", headers=owner.auth, json={"path": unknown}
    )
    assert_error(missing, 404)
    anonymous = await client.request("DELETE", "/api/upload", json={"path": result["path"]})
    assert_error(anonymous, 401)
    assert_error(await client.request("DELETE", "/api/upload", headers=owner.auth, json={}), 400)
    assert rows(database) == 1 and on_disk(store) == [result["path"]]


async def test_delete_own_upload(
    client: httpx.AsyncClient, database: str, store: StoreProbe
) -> None:
    agent = await register(client, "Tidy")
    keep = await uploaded(client, agent, image_bytes("PNG"))
    gone = await uploaded(client, agent, SVG)
    response = await client.request(
        "DELETE", "/api/upload", headers=agent.auth, json={"path": gone["path"]}
    )
    assert response.status_code == 200, response.text
    assert isinstance(response.json()["message"], str)
    assert_error(await client.get(served_path(gone)), 404, "not_found")
    assert on_disk(store) == [keep["path"]] and rows(database) == 1
    again = await client.request(
        "DELETE", "/api/upload", headers=agent.auth, json={"path": gone["path"]}
    )
    assert_error(again, 404)
    assert (await client.get(served_path(keep))).status_code == 200


async def test_delete_body_keeps_the_general_size_limit(client: httpx.AsyncClient) -> None:
    agent = await register(client, "Huge Json")
    response = await client.request(
        "DELETE",
        "/api/upload",
        headers={**agent.auth, "content-type": "application/json"},
        content=b'{"path": "' + b"a" * 2 * MB + b'"}',
    )
    assert_error(response, 413, "payload_too_large")


async def test_delete_owner_removes_the_agents_folder(
    client: httpx.AsyncClient, local_store: StoreProbe, roomy_registration: None
) -> None:
    store = local_store  # the Postgres store's bytes go with the agent's row
    agent = await register(client, "Leaving")
    other = await register(client, "Staying")
    mine = [await uploaded(client, agent, image_bytes(fmt)) for fmt in ("PNG", "WEBP")]
    theirs = await uploaded(client, other, image_bytes("JPEG"))
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    assert ctx.files.delete_owner(uuid.UUID(agent.agent_id)) == 2
    assert not (store.root / agent.agent_id).exists()
    for result in mine:
        assert_error(await client.get(served_path(result)), 404)
    assert on_disk(store) == [theirs["path"]]
    assert (await client.get(served_path(theirs))).status_code == 200


# --- serving ----------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/uploads/nobody/nothing.png",
        "/uploads/..%2F..%2Fetc/passwd",
        "/uploads/6f1c2d4e-8a9b-4c3d-9e0f-112233445566/" + "0" * 32 + ".png",
        "/uploads/6f1c2d4e-8a9b-4c3d-9e0f-112233445566/..%2F..%2F..%2Fetc%2Fpasswd",
        "/uploads/6f1c2d4e-8a9b-4c3d-9e0f-112233445566/" + "0" * 32 + ".PNG",
    ],
)
async def test_unknown_or_malformed_upload_urls_are_404(
    client: httpx.AsyncClient, store: StoreProbe, path: str
) -> None:
    assert_error(await client.get(path), 404)


async def test_a_file_without_its_row_is_not_served(
    client: httpx.AsyncClient, local_store: StoreProbe
) -> None:
    agent = await register(client, "Orphan")
    path = f"{agent.agent_id}/{'a' * 32}.png"
    local_store.files.save(path, image_bytes("PNG"))  # type: ignore[union-attr]
    assert_error(await client.get(f"/uploads/{path}"), 404)


async def test_the_body_is_read_before_a_database_connection_is_taken(
    client: httpx.AsyncClient, store: StoreProbe
) -> None:
    """A slow upload must not hold one of the few pooled connections while it streams."""
    agent = await register(client, "Slow")
    pool = client._transport.app.state.ctx.engine.sync_engine.pool  # type: ignore[attr-defined]
    boundary = "slowboundary"
    held: list[int] = []

    async def body() -> AsyncIterator[bytes]:
        yield f'--{boundary}\r\nContent-Disposition: form-data; name="file"\r\n\r\n'.encode()
        png = image_bytes("PNG")
        for i in range(0, len(png), 16):
            held.append(pool.checkedout())
            yield png[i : i + 16]
        yield f"\r\n--{boundary}--\r\n".encode()

    response = await client.post(
        "/api/upload",
        headers={**agent.auth, "content-type": f"multipart/form-data; boundary={boundary}"},
        content=body(),
    )
    assert response.status_code == 201, response.text
    assert held and set(held) == {0}
