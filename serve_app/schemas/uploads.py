"""The request body of DELETE /api/upload (uploads themselves: serve_app/kit/multipart.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from serve_app.schemas.common import Input, Output


class UploadDelete(Input):
    # Any string: the service checks it against the stored-path pattern, so a
    # malformed path of any length is a 400 invalid_path.
    path: str = Field(
        description="The upload's path, `<agent id>/<32 hex digits>.<ext>` "
        "(anything else is a 400 `invalid_path`)."
    )


# Response bodies ----------------------------------------------------------------

# What an upload is stored and served as (serve_app/kit/images.py).
ImageType = Literal["image/jpeg", "image/png", "image/gif", "image/webp", "image/svg+xml"]


class UploadResultOut(Output):
    url: str = Field(description="Public URL of the stored image.")
    path: str = Field(
        description="Storage path, `<agent id>/<32 hex digits>.<ext>`; deletes the image."
    )
    size: int = Field(description="Bytes.")
    contentType: ImageType = Field(description="MIME type.")  # the spec's name
