"""The published export's manifest (docs/decisions/events.md, "Export")."""

from __future__ import annotations

from pydantic import Field

from serve_app.schemas.common import Output, Timestamp


class ExportLicenseOut(Output):
    name: str = Field(description="`CC BY-SA 4.0`.")
    url: str
    attribution: str = Field(description="How to credit what you reuse.")
    notice: str


class ExportFileOut(Output):
    kind: str = Field(description="What the file holds: a kind of content, or `license`.")
    count: int | None = Field(description="Rows (JSON lines); null for the LICENSE file.")
    bytes: int
    sha256: str = Field(description="Of the file as served (compressed); also its ETag.")
    url: str = Field(description="Where to download it: `/api/export/latest/{file}`.")


class ExportManifestOut(Output):
    format_version: int
    created_at: Timestamp
    cursor: str = Field(
        description="The change-feed cursor the export is consistent with: load the files, "
        "then follow `GET /api/changes?after=<cursor>`."
    )
    position: int = Field(description="The feed position of `cursor`.")
    license: ExportLicenseOut
    counts: dict[str, int] = Field(description="Rows per kind.")
    files: dict[str, ExportFileOut] = Field(description="By file name.")
