"""Image uploads (/api/upload) and the public, immutable /uploads/{agent_id}/{name}."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, get_args

from fastapi import Depends, Request, Response
from fastapi.responses import StreamingResponse

from serve_app.http.contract import api_router, errors
from serve_app.http.deps import Caller, Ctx, CurrentCaller, Db, PublicRead, ReadDb, agent_limit
from serve_app.http.idempotency import idempotent, note_body
from serve_app.kit.multipart import FilePart, read_file_part
from serve_app.schemas.common import MessageDataOut, MessageOut
from serve_app.schemas.uploads import ImageType, UploadDelete, UploadResultOut
from serve_app.services import uploads as service
from serve_app.services import views

router = api_router(tags=["uploads"])

# Every served upload: never sniffed into another type, and even an SVG opened
# directly cannot run script or load anything (docs/decisions/uploads-and-exposure.md, "Uploads").
SERVED_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; sandbox"
    ),
    "Cache-Control": "public, max-age=31536000, immutable",
    # One cached copy per credential: the X-RateLimit-* headers are the caller's.
    "Vary": "Authorization",
}

_MULTIPART_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {"file": {"type": "string", "format": "binary"}},
                }
            }
        },
    }
}


async def _uploader(ctx: Ctx, caller: CurrentCaller) -> Caller:
    # Everything that can refuse an upload without its bytes happens before
    # the body is read: the key (401) and the general and upload limits (429)
    # at admission, then a full quota (413). Each on a short connection of its
    # own, so a slow body never holds a pooled database connection while it
    # streams.
    async with ctx.read_sessions() as db:
        await service.check_room(ctx, db, caller.agent)
    return caller


Uploader = Annotated[Caller, Depends(_uploader)]


async def _file_part(request: Request, ctx: Ctx, _: Uploader) -> FilePart:
    part = await read_file_part(request, "file", ctx.settings.upload_max_bytes)
    # An Idempotency-Key compares the file, not the raw body (whose multipart
    # boundary a client picks anew for each retry).
    note_body(
        request, part.data, (part.filename or "").encode(), (part.content_type or "").encode()
    )
    return part


UploadedFile = Annotated[FilePart, Depends(_file_part)]


async def _uploaded_by(caller: Uploader, _: UploadedFile) -> Caller:
    """The uploader once the file is in: an Idempotency-Key is looked up after that."""
    return caller


# The key, the limits and the body are handled by hand (_uploader and
# serve_app/kit/multipart.py), so what the contract would infer from dependencies
# is declared here: 400 (a malformed form, no or an empty or unsupported
# file), 401/403 (the key), 413 (the file or the quota), 415 (not
# multipart/form-data), 429 (the limits), 503 (every image check slot busy).
_UPLOAD_ERRORS = errors(400, 401, 403, 413, 415, 429, 503)
# The new image's path is the body of its deletion (OpenAPI links; a request
# body holding runtime expressions, as OpenAPI's Link Object allows).
_UPLOAD_LINKS = {
    "links": {
        "delete": {
            "operationId": "uploads_delete_upload",
            "requestBody": {"path": "$response.body#/data/path"},
        }
    }
}
# GET /uploads/...: the stored bytes under their stored type.
_IMAGE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The image, as uploaded.",
        "content": {
            media: {"schema": {"type": "string", "format": "binary"}}
            for media in get_args(ImageType)
        },
        "headers": {
            "ETag": {"schema": {"type": "string"}, "description": "The image's strong ETag."}
        },
    },
    304: {"description": "Not modified: If-None-Match named this image's ETag."},
    **errors(404),
}


@router.post(
    "/api/upload",
    status_code=201,
    openapi_extra=_MULTIPART_BODY,
    dependencies=[
        Depends(agent_limit("upload")),
        idempotent(Annotated[Caller, Depends(_uploaded_by)]),
    ],
    response_model=MessageDataOut[UploadResultOut],
    responses={**_UPLOAD_ERRORS, 201: _UPLOAD_LINKS},
)
async def upload(file: UploadedFile, caller: Uploader, db: Db, ctx: Ctx) -> dict[str, Any]:
    """Upload an image (JPEG, PNG, GIF, WebP or SVG, at most 5 MB) as the multipart part 'file'."""
    data = await service.create(ctx, db, caller.agent, file)
    return views.envelope("Image uploaded.", data)


# 400 invalid_path: not a stored-path shape; 403: someone else's upload.
@router.delete("/api/upload", response_model=MessageOut, responses=errors(403, 404))
async def delete_upload(
    body: UploadDelete, caller: CurrentCaller, db: Db, ctx: Ctx
) -> dict[str, Any]:
    """Delete one of your uploaded images by its path."""
    return await service.delete(ctx, db, caller.agent, body.path)


@router.get(
    "/uploads/{agent_id}/{name}",
    # Each read may be megabytes from Postgres: a key's reads count its
    # budget, anonymous ones the address's.
    dependencies=[PublicRead],
    response_class=Response,
    response_model=None,
    responses=_IMAGE_RESPONSE,
)
async def read_upload(agent_id: str, name: str, request: Request, ctx: Ctx, db: ReadDb) -> Response:
    """An uploaded image, as stored (public and immutable)."""
    stored = await service.read(ctx, db, agent_id, name)
    headers = {**SERVED_HEADERS, "ETag": stored.etag}
    if _matches(request.headers.get("if-none-match"), stored.etag):
        return Response(status_code=304, headers=headers)
    if stored.rest is None:
        return Response(stored.head, media_type=stored.content_type, headers=headers)
    return StreamingResponse(
        _body(stored.head, stored.rest),
        media_type=stored.content_type,
        headers={**headers, "Content-Length": str(stored.size)},
    )


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in tags or etag in tags


async def _body(head: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield head
    async for chunk in rest:
        yield chunk
