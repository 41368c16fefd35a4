"""What an uploaded file is, judged by its bytes alone (never by the declared
content type or file name), and whether it is safe to serve.

Raster images (JPEG, PNG, GIF, WebP) are recognised by their magic numbers,
then opened with Pillow, which must report the same format, accept the file
(``verify``) and decode it (``load``); images over :data:`MAX_PIXELS` are
refused before decoding (decompression bombs). SVG is well-formed XML whose
root is ``svg`` (in the SVG namespace or without one), parsed with no DTD,
entities or external references, and refused when it could run script or
load anything from elsewhere (docs/decisions/uploads-and-exposure.md, "Uploads").

Plain functions: no I/O, no event loop; the service runs :func:`inspect` in a
worker thread (decoding a large image takes CPU time).
"""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass
from xml.etree.ElementTree import Element, ParseError, TreeBuilder

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser
from PIL import Image

# 40 megapixels: any photo a camera phone makes by default, yet a decode stays
# around 120 MB at most (RGB); Pillow's own warning starts at 89 MP.
MAX_PIXELS = 40_000_000


@dataclass(frozen=True)
class Kind:
    content_type: str
    ext: str
    pillow: tuple[str, ...] = ()  # the formats Pillow may report; empty for SVG


JPEG = Kind("image/jpeg", "jpg", ("JPEG", "MPO"))
PNG = Kind("image/png", "png", ("PNG",))
GIF = Kind("image/gif", "gif", ("GIF",))
WEBP = Kind("image/webp", "webp", ("WEBP",))
SVG = Kind("image/svg+xml", "svg")


class Rejected(ValueError):
    """The file is refused; ``error`` is the error type the client sees."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def unsupported() -> Rejected:
    return Rejected(
        "unsupported_file_type", "Only JPEG, PNG, GIF, WebP and SVG images can be uploaded."
    )


def sniff_raster(data: bytes) -> Kind | None:
    """The raster type the magic numbers say, if any."""
    if data.startswith(b"\xff\xd8\xff"):
        return JPEG
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if data.startswith((b"GIF87a", b"GIF89a")):
        return GIF
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return WEBP
    return None


def inspect(data: bytes) -> Kind:
    """The file's type, or :class:`Rejected` (``unsupported_file_type``,
    ``invalid_image`` or ``unsafe_svg``)."""
    kind = sniff_raster(data)
    if kind is not None:
        check_raster(data, kind)
        return kind
    check_svg(data)
    return SVG


# --- raster ---------------------------------------------------------------


def check_raster(data: bytes, kind: Kind) -> None:
    broken = Rejected("invalid_image", f"The file is not a readable {kind.pillow[0]} image.")
    try:
        with warnings.catch_warnings():
            # Pillow warns (89 MP) before it refuses (179 MP): a warning is a refusal.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=[kind.pillow[0]]) as image:
                if image.format not in kind.pillow:
                    raise broken
                _check_size(image.width, image.height)
                if kind is GIF:
                    # Every frame within the bound too: a GIF's frame may be
                    # larger than its screen (Pillow grows the image to it),
                    # so a small first frame could hide a huge later one. Read
                    # from the frame headers: Pillow's seek decodes the frames
                    # before it (a minute of CPU for a few MB of large frames).
                    for width, height in gif_frame_sizes(data):
                        _check_size(width, height)
                image.verify()
            # verify() leaves the image unusable and checks little for most
            # formats: decoding the (first) frame proves the data is whole.
            with Image.open(io.BytesIO(data), formats=[kind.pillow[0]]) as image:
                image.load()
    except Rejected:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _too_many_pixels() from exc
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, EOFError…
        raise broken from exc


def gif_frame_sizes(data: bytes) -> list[tuple[int, int]]:
    """Each frame's (width, height) from its image descriptor, walking the
    GIF's blocks without decoding anything; stops at the trailer or at data
    that ends early (Pillow judges the file itself)."""
    sizes: list[tuple[int, int]] = []
    if len(data) < 13:
        return sizes
    at = 13
    if data[10] & 0x80:  # a global colour table
        at += 3 * (2 ** ((data[10] & 0x07) + 1))

    def skip_sub_blocks(at: int) -> int:
        while at < len(data):
            size = data[at]
            at += 1 + size
            if size == 0:
                break
        return at

    while at < len(data):
        block = data[at]
        if block == 0x2C:  # image descriptor
            if at + 10 > len(data):
                break
            width = int.from_bytes(data[at + 5 : at + 7], "little")
            height = int.from_bytes(data[at + 7 : at + 9], "little")
            sizes.append((width, height))
            packed = data[at + 9]
            at += 10
            if packed & 0x80:  # a local colour table
                at += 3 * (2 ** ((packed & 0x07) + 1))
            at = skip_sub_blocks(at + 1)  # after the LZW minimum code size
        elif block == 0x21:  # an extension: its label, then sub-blocks
            at = skip_sub_blocks(at + 2)
        else:  # the trailer (0x3B), or not a block
            break
    return sizes


def _check_size(width: int, height: int) -> None:
    if width < 1 or height < 1:
        raise Rejected("invalid_image", "The image has no pixels.")
    if width * height > MAX_PIXELS:
        raise _too_many_pixels()


def _too_many_pixels() -> Rejected:
    return Rejected(
        "invalid_image", f"The image has more than {MAX_PIXELS:,} pixels (a decompression bomb?)."
    )


# --- SVG -------------------------------------------------------------------

SVG_NS = "http://www.w3.org/2000/svg"
# Elements plus attributes: a detailed map or illustration has tens of
# thousands; more is refused before it costs seconds of parsing.
MAX_SVG_NODES = 200_000
# Elements that run script, embed other documents or play media from elsewhere.
_FORBIDDEN_ELEMENTS = frozenset(
    {
        "script",
        "foreignobject",
        "iframe",
        "frame",
        "embed",
        "object",
        "handler",
        "listener",
        "audio",
        "video",
        "base",
        "link",
    }
)
_ANIMATIONS = frozenset({"set", "animate", "animatemotion", "animatetransform", "animatecolor"})
# Raster images inlined as data: URIs are the only references outside the document.
_INLINE_IMAGE = re.compile(r"^data:image/(?:png|jpeg|jpg|gif|webp)[;,]")
# Linear on any input (no lazy scan to a far-away closing parenthesis).
_URL = re.compile(r"url\(['\"]?([^'\")]*)")
_CSS_FORBIDDEN = ("@import", "image-set(", "expression(", "behavior:", "-moz-binding")
_SCRIPT_SCHEMES = ("javascript:", "vbscript:", "data:text/html", "data:application/")
_SPACE = re.compile(r"[\x00-\x20]+")

# The first element's name, past the prolog (XML declaration, comments,
# processing instructions, a DOCTYPE with its internal subset): only used to
# word the refusal of a file that does not parse.
_PROLOG = re.compile(
    rb"\A(?:\xef\xbb\xbf)?(?:\s+|<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^\[>]*(?:\[.*?\])?\s*>)*",
    re.DOTALL | re.IGNORECASE,
)
_FIRST_NAME = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?([A-Za-z_][\w.-]*)")
_DOCTYPE_NAME = re.compile(rb"<!DOCTYPE\s+(?:[A-Za-z_][\w.-]*:)?([A-Za-z_][\w.-]*)", re.IGNORECASE)


class _Builder(TreeBuilder):
    """The element tree, noting processing instructions (before the root too)
    and refusing documents with more than :data:`MAX_SVG_NODES` nodes."""

    def __init__(self) -> None:
        super().__init__()
        self.pis: list[str] = []
        self.nodes = 0

    def start(self, tag: str, attrs: dict[str, str]) -> Element:
        self.nodes += 1 + len(attrs)
        if self.nodes > MAX_SVG_NODES:
            raise Rejected(
                "invalid_image", f"The SVG has more than {MAX_SVG_NODES:,} elements and attributes."
            )
        return super().start(tag, attrs)

    def pi(self, target: str, text: str | None = None) -> Element:
        self.pis.append(target)
        return super().pi(target, text)


def _unsafe(why: str) -> Rejected:
    return Rejected("unsafe_svg", f"SVG refused: {why}.")


def _looks_like_svg(data: bytes) -> bool:
    head = data[:65536]
    doctype = _DOCTYPE_NAME.search(head)
    if doctype is not None:
        return doctype.group(1).lower() == b"svg"
    prolog = _PROLOG.match(head)
    first = _FIRST_NAME.match(head, prolog.end() if prolog else 0)
    return first is not None and first.group(1).lower() == b"svg"


def check_svg(data: bytes) -> None:
    """Accept a well-formed, script-free, self-contained SVG document."""
    builder = _Builder()
    parser = DefusedXMLParser(
        target=builder, forbid_dtd=True, forbid_entities=True, forbid_external=True
    )
    try:
        parser.feed(data)
        root = parser.close()
    except Rejected:
        raise
    except DefusedXmlException as exc:
        if _looks_like_svg(data):
            raise _unsafe("a DOCTYPE, entities or external entities are not allowed") from exc
        raise unsupported() from exc
    except (ParseError, ValueError, UnicodeError) as exc:
        if _looks_like_svg(data):
            raise Rejected("invalid_image", "The SVG is not well-formed XML.") from exc
        raise unsupported() from exc
    if not isinstance(root, Element) or root.tag not in (f"{{{SVG_NS}}}svg", "svg"):
        raise unsupported()
    if builder.pis:
        raise _unsafe("processing instructions (e.g. xml-stylesheet) are not allowed")
    for element in root.iter():
        _check_element(element)


def _local(name: str) -> str:
    return name.rsplit("}", 1)[-1].lower()


def _check_element(element: Element) -> None:
    name = _local(element.tag)
    if name in _FORBIDDEN_ELEMENTS:
        raise _unsafe(f"<{name}> elements are not allowed")
    if name in _ANIMATIONS:
        target = element.get("attributeName", "").split(":")[-1].strip().lower()
        if target in ("href", "src") or target.startswith("on"):
            raise _unsafe("animations may not change links or event handlers")
    if name == "style":
        # All of its text: a browser builds the sheet from every text node of
        # <style>, also those after a child element (its children's tails).
        _check_css("".join(element.itertext()))
    for attr, value in element.attrib.items():
        _check_attribute(attr, value)


def _check_attribute(attr: str, value: str) -> None:
    name = _local(attr)
    if name.startswith("on"):
        raise _unsafe(f"event handler attributes ({name}) are not allowed")
    compact = _SPACE.sub("", value).lower()
    if any(scheme in compact for scheme in _SCRIPT_SCHEMES):
        raise _unsafe("script URLs are not allowed")
    if name in ("href", "src") and not _local_reference(compact):
        raise _unsafe("links and references must point inside the document (#id)")
    if not attr.startswith("{"):
        # Presentation attributes and style are CSS; attributes in other
        # namespaces (an editor's metadata) are never rendered.
        _check_css(value)


def _check_css(text: str) -> None:
    compact = _SPACE.sub("", text).lower()
    if "\\" in compact:
        raise _unsafe("CSS escapes are not allowed")
    if any(token in compact for token in _CSS_FORBIDDEN):
        raise _unsafe("CSS imports and expressions are not allowed")
    for match in _URL.finditer(compact):
        if not _local_reference(match.group(1)):
            raise _unsafe("url() must point inside the document (#id)")


def _local_reference(url: str) -> bool:
    return url.startswith("#") or _INLINE_IMAGE.match(url) is not None
