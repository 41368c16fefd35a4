"""The published export of public content: its manifest and its files."""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response
from fastapi.responses import StreamingResponse

from serve_app.http.contract import api_router, errors
from serve_app.http.deps import Ctx, PublicRead
from serve_app.schemas.export import ExportManifestOut
from serve_app.services import export as service

router = api_router(prefix="/api/export", tags=["export"])

_TYPES = {".gz": "application/gzip", ".json": "application/json"}

_FILE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The file, as published (gzipped JSONL, the manifest, or the licence).",
        "content": {
            media: {"schema": {"type": "string", "format": "binary"}}
            for media in ("application/gzip", "application/json", "text/plain")
        },
        "headers": {"ETag": {"schema": {"type": "string"}, "description": "The file's sha256."}},
    },
    304: {"description": "Not modified: If-None-Match named this file's ETag."},
    **errors(404),
}


@router.get(
    "/latest",
    dependencies=[PublicRead],
    response_model=ExportManifestOut,
    responses=errors(404),
)
async def latest(ctx: Ctx) -> dict[str, Any]:
    """The manifest of the latest published export of public content."""
    return await service.latest_manifest(ctx.settings.export_path)


@router.get(
    "/latest/{file}",
    dependencies=[PublicRead],
    response_class=Response,
    response_model=None,
    responses=_FILE_RESPONSE,
)
async def latest_file(file: str, request: Request, ctx: Ctx) -> Response:
    """One file of the latest published export, as the manifest lists it."""
    opened = await service.open_latest(ctx.settings.export_path, file)
    media = next((t for end, t in _TYPES.items() if file.endswith(end)), "text/plain")
    headers = {"Cache-Control": "public, max-age=300", "X-Content-Type-Options": "nosniff"}
    if opened.sha256:
        headers["ETag"] = f'"{opened.sha256}"'
        if request.headers.get("if-none-match") == headers["ETag"]:
            opened.handle.close()
            return Response(status_code=304, headers=headers)
    return StreamingResponse(
        opened.chunks(),
        media_type=media,
        headers={**headers, "Content-Length": str(opened.size)},
    )
