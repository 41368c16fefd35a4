"""Image uploads (/api/upload) and the public, immutable /uploads/{agent_id}/{name}."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request, Response

from serve_app.contract import api_router
from serve_app.deps import Caller, Ctx, CurrentCaller, Db, ReadDb, authenticate_briefly, enforce
from serve_app.idempotency import idempotent, note_body
from serve_app.multipart import FilePart, read_file_part
from serve_app.schemas.uploads import UploadDelete
from serve_app.services import uploads as service

router = api_router(tags=["uploads"])

# Every served upload: never sniffed into another type, and even an SVG opened
# directly cannot run script or load anything (docs/decisions.md, "Uploads").
SERVED_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; sandbox"
    ),
    "Cache-Control": "public, max-age=31536000, immutable",
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


async def _uploader(request: Request, response: Response, ctx: Ctx) -> Caller:
    # Everything that can refuse an upload without its bytes happens before
    # the body is read: the key (401), the general and upload limits (429),
    # a full quota (413). Each on a short transaction of its own, so a slow
    # body never holds a pooled database connection while it streams.
    caller = await authenticate_briefly(request, response, ctx)
    await enforce(ctx, response, "upload", str(caller.agent.id))
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


@router.post(
    "/api/upload",
    status_code=201,
    openapi_extra=_MULTIPART_BODY,
    dependencies=[idempotent(Annotated[Caller, Depends(_uploaded_by)])],
)
async def upload(file: UploadedFile, caller: Uploader, db: Db, ctx: Ctx) -> dict[str, Any]:
    """Upload an image (JPEG, PNG, GIF, WebP or SVG, at most 5 MB) as the multipart part 'file'."""
    data = await service.create(ctx, db, caller.agent, file)
    return {"message": "Image uploaded.", "data": data}


@router.delete("/api/upload")
async def delete_upload(
    body: UploadDelete, caller: CurrentCaller, db: Db, ctx: Ctx
) -> dict[str, Any]:
    """Delete one of your uploaded images by its path."""
    return await service.delete(ctx, db, caller.agent, body.path)


@router.get("/uploads/{agent_id}/{name}", response_class=Response)
async def read_upload(agent_id: str, name: str, ctx: Ctx, db: ReadDb) -> Response:
    """An uploaded image, as stored (public and immutable)."""
    data, content_type = await service.read(ctx, db, agent_id, name)
    return Response(data, media_type=content_type, headers=SERVED_HEADERS)
