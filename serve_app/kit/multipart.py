"""One file out of a multipart/form-data body, parsed as the body streams in.

Starlette's form parser spools a file of any size; here the named part is kept
in memory up to ``max_bytes`` and the request is refused (413) as soon as one
more byte arrives, without reading the rest of the body. Other parts are
skipped without being kept. The whole body is also capped by
``BodyLimitMiddleware`` (``serve_app/http/bodylimit.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from serve_app.kit.errors import AppError, BadRequest, PayloadTooLarge

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks


class UnsupportedMediaType(AppError):
    status = 415
    error = "unsupported_media_type"


@dataclass(frozen=True)
class FilePart:
    data: bytes
    # What the client declared: reported, never trusted (the bytes decide).
    filename: str | None
    content_type: str | None


def _invalid(message: str) -> BadRequest:
    return BadRequest(message, error="invalid_multipart")


@dataclass
class _Reader:
    name: bytes
    max_bytes: int
    header_field: bytearray = field(default_factory=bytearray)
    header_value: bytearray = field(default_factory=bytearray)
    headers: dict[bytes, bytes] = field(default_factory=dict)
    in_target: bool = False
    buffer: bytearray | None = None
    filename: str | None = None
    content_type: str | None = None
    complete: bool = False  # the target part ended
    ended: bool = False  # the closing boundary was seen

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self.part_begin,
            "on_header_field": self.header_field_data,
            "on_header_value": self.header_value_data,
            "on_header_end": self.header_end,
            "on_headers_finished": self.headers_finished,
            "on_part_data": self.part_data,
            "on_part_end": self.part_end,
            "on_end": self.end,
        }

    def part_begin(self) -> None:
        self.headers = {}
        self.in_target = False

    def header_field_data(self, data: bytes, start: int, end: int) -> None:
        self.header_field += data[start:end]

    def header_value_data(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def header_end(self) -> None:
        self.headers[bytes(self.header_field).strip().lower()] = bytes(self.header_value).strip()
        self.header_field.clear()
        self.header_value.clear()

    def headers_finished(self) -> None:
        disposition, options = parse_options_header(
            self.headers.get(b"content-disposition", b"").decode("latin-1")
        )
        if disposition != b"form-data" or options.get(b"name") != self.name:
            return
        if self.buffer is not None:
            raise _invalid(f"Send one '{self.name.decode()}' part, not several.")
        self.in_target = True
        self.buffer = bytearray()
        filename = options.get(b"filename")
        self.filename = filename.decode("utf-8", "replace") if filename is not None else None
        declared = self.headers.get(b"content-type")
        self.content_type = declared.decode("latin-1") if declared else None

    def part_data(self, data: bytes, start: int, end: int) -> None:
        if not self.in_target or self.buffer is None:
            return  # another field: skipped, never kept
        if len(self.buffer) + (end - start) > self.max_bytes:
            self.buffer = None  # let go of it now
            raise PayloadTooLarge(f"The file exceeds {self.max_bytes} bytes.")
        self.buffer += data[start:end]

    def part_end(self) -> None:
        if self.in_target:
            self.complete = True
            self.in_target = False

    def end(self) -> None:
        self.ended = True


async def read_file_part(request: Request, name: str, max_bytes: int) -> FilePart:
    """The part called ``name`` of a multipart/form-data body (at most ``max_bytes``)."""
    media_type, params = parse_options_header(request.headers.get("content-type"))
    if media_type != b"multipart/form-data":
        raise UnsupportedMediaType(
            f"Send the file as multipart/form-data with a part named '{name}'."
        )
    boundary = params.get(b"boundary")
    if not boundary:
        raise _invalid("The multipart/form-data content type has no boundary.")
    reader = _Reader(name=name.encode(), max_bytes=max_bytes)
    try:
        parser = MultipartParser(boundary, reader.callbacks())
        async for chunk in request.stream():
            if chunk:
                parser.write(chunk)
    except (MultipartParseError, ValueError) as exc:
        raise _invalid(f"Malformed multipart/form-data body: {exc}") from exc
    except ClientDisconnect as exc:
        raise _invalid("The upload was interrupted.") from exc
    if reader.buffer is None or not reader.complete:
        if reader.buffer is None:
            raise BadRequest(f"No '{name}' part in the form.", error="missing_file")
        raise _invalid("The body ended before the file did.")
    if not reader.ended:
        raise _invalid("The body ended before the closing boundary.")
    if not reader.buffer:
        raise BadRequest("The file is empty.", error="empty_file")
    return FilePart(bytes(reader.buffer), reader.filename, reader.content_type)
