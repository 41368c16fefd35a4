"""The request body of DELETE /api/upload (uploads themselves: serve_app/multipart.py)."""

from __future__ import annotations

from serve_app.schemas.common import Input


class UploadDelete(Input):
    # Any string: the service checks it against the stored-path pattern, so a
    # malformed path of any length is a 400 invalid_path.
    path: str
