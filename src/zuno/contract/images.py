"""Images a tool result carries to the model: known by their first bytes, sized by their header.

``read`` recognises PNG, JPEG, GIF and WebP by signature (never by the file's
name), reads the pixel size from the header, and keeps the bytes as an
artifact of the call. What travels with the result, into the stored
conversation and to the provider, is an :class:`ImageAttachment`: the
artifact's path and what the header said, never the bytes themselves. A
provider reads the artifact when it builds a request, so a session resumed
from SQL sends the image again.

Providers refuse some images outright (Anthropic: over 5 MiB of base64, or a
side over 8000 pixels), and a refused image stays in the history and fails
every later request of the session. So an image is attached only when its
header could be read and it is within :data:`MAX_SIDE` and the byte limit
(``tool_output.image_max_bytes``); any other image is described in words.
For the same reason one request carries only the newest images of the
conversation (:data:`REQUEST_MAX_IMAGES`, :data:`REQUEST_MAX_BYTES`); older
ones are named in words, and the model can read a file again to see it.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from zuno.contract.output import format_size

__all__ = [
    "CANNOT_SEE",
    "DEFAULT_IMAGE_MAX_BYTES",
    "GONE",
    "IMAGE_FORMATS",
    "MAX_SIDE",
    "REQUEST_MAX_BYTES",
    "REQUEST_MAX_IMAGES",
    "TOO_MANY",
    "ImageAttachment",
    "ImageFormat",
    "attachment_for",
    "image_format",
    "image_max_bytes",
    "image_refusal",
    "image_size",
    "newest_images",
    "unseen_image_text",
]

DEFAULT_IMAGE_MAX_BYTES = 3 * 1024 * 1024 + 768 * 1024
"""3.75 MiB: its base64 form stays within the 5 MiB Anthropic accepts per image."""
MAX_SIDE = 8000
"""The longest side, in pixels, an attached image may have (Anthropic's limit)."""
REQUEST_MAX_IMAGES = 20
"""Images one model request carries at most, the newest first: past 20, Anthropic
accepts only sides up to 2000 pixels, and it refuses more than 100 at all."""
REQUEST_MAX_BYTES = 15 * 1024 * 1024
"""Image bytes one request carries at most; as base64 (20 MiB) they leave room
within Anthropic's 32 MB request limit for the conversation's text."""


@dataclass(frozen=True, slots=True)
class ImageFormat:
    """One image format a model can be sent."""

    name: str
    """The short name a person reads ("PNG")."""
    media_type: str
    """The MIME type the APIs want ("image/png")."""
    extension: str
    """The artifact file's extension (".png")."""


PNG = ImageFormat("PNG", "image/png", ".png")
JPEG = ImageFormat("JPEG", "image/jpeg", ".jpg")
GIF = ImageFormat("GIF", "image/gif", ".gif")
WEBP = ImageFormat("WebP", "image/webp", ".webp")
IMAGE_FORMATS: tuple[ImageFormat, ...] = (PNG, JPEG, GIF, WEBP)
"""Every format ``read`` attaches."""

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers carry the size; C4 (Huffman), C8 and CC (arithmetic
# coding tables) share the range and do not.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_format(head: bytes) -> ImageFormat | None:
    """The image format ``head`` (a file's first bytes) starts, or None."""
    if head.startswith(_PNG_SIGNATURE):
        return PNG
    if head.startswith(b"\xff\xd8\xff"):
        return JPEG
    if head.startswith((b"GIF87a", b"GIF89a")):
        return GIF
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return WEBP
    return None


def image_size(data: bytes, fmt: ImageFormat) -> tuple[int, int] | None:
    """Width and height in pixels from the header of ``data``; None when unreadable."""
    try:
        if fmt is PNG:
            size = _png_size(data)
        elif fmt is GIF:
            size = struct.unpack("<HH", data[6:10])
        elif fmt is JPEG:
            size = _jpeg_size(data)
        else:
            size = _webp_size(data)
    except (struct.error, IndexError):
        return None
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return int(size[0]), int(size[1])


def _png_size(data: bytes) -> tuple[int, int] | None:
    # The first chunk is IHDR: length, type, then width and height.
    if data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    pos = 2
    # Bounded: every step moves forward by a segment's length or a byte.
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return width, height
        if marker == 0xDA or length < 2:  # image data began without a frame header
            return None
        pos += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 ":  # lossy: a key frame's start code, then 14-bit sizes
        if data[23:26] != b"\x9d\x01\x2a":
            return None
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L":  # lossless: a signature byte, then 14-bit sizes minus one
        if data[20] != 0x2F:
            return None
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":  # extended: 24-bit canvas sizes minus one
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    return None


def image_max_bytes(config: Any) -> int:
    """``tool_output.image_max_bytes`` of ``config`` (the default when there is none)."""
    # Tools' own tests build contexts without a configuration.
    settings = getattr(config, "tool_output", None)
    return int(getattr(settings, "image_max_bytes", DEFAULT_IMAGE_MAX_BYTES))


def image_refusal(dims: tuple[int, int], size: int, max_bytes: int) -> str | None:
    """Why an image of ``dims`` pixels and ``size`` bytes is described, not sent; None sends it.

    Args:
        dims: Width and height from its header.
        size: Its size in bytes.
        max_bytes: ``tool_output.image_max_bytes``.
    """
    if max_bytes == 0:
        return "tool_output.image_max_bytes is 0, so images are only described"
    if size > max_bytes:
        return f"it is over tool_output.image_max_bytes ({format_size(max_bytes)})"
    if max(dims) > MAX_SIDE:
        return f"a side is over {MAX_SIDE} pixels, more than models accept"
    return None


class ImageAttachment(BaseModel):
    """An image a tool result carries: where its bytes are kept and what its header says.

    Attributes:
        path: The artifact file holding the image's bytes.
        media_type: Its MIME type ("image/png").
        width: Its width in pixels.
        height: Its height in pixels.
        size: Its size in bytes.
        source: What it is an image of, for the model ("photo.png").
    """

    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    path: str
    media_type: str
    width: int
    height: int
    size: int
    source: str = ""

    @property
    def format_name(self) -> str:
        """The short format name ("PNG"), from the media type."""
        for fmt in IMAGE_FORMATS:
            if fmt.media_type == self.media_type:
                return fmt.name
        return self.media_type

    def describe(self) -> str:
        """The words a model reads instead of the image ("a PNG image, 640x480")."""
        return f"a {self.format_name} image, {self.width}x{self.height}"

    def base64_data(self) -> str | None:
        """The image's bytes as base64, read from its artifact; None when it is gone."""
        try:
            data = Path(self.path).read_bytes()
        except OSError:
            return None
        return base64.b64encode(data).decode("ascii")


CANNOT_SEE = "this model cannot see images"
"""Why a provider configured with ``images: false`` sends words instead of an image."""
GONE = "its saved copy is gone, so it cannot be shown again"
"""Why an image whose artifact was deleted is sent as words."""
TOO_MANY = (
    f"only the newest {REQUEST_MAX_IMAGES} images (at most "
    f"{REQUEST_MAX_BYTES // (1024 * 1024)} MiB) go with each request; read it again to see it"
)
"""Why an older image of a long conversation is sent as words."""


def newest_images(images: Iterable[ImageAttachment]) -> frozenset[str]:
    """The artifact paths of the images a request carries, ``images`` in conversation order.

    The newest are taken until :data:`REQUEST_MAX_IMAGES` or
    :data:`REQUEST_MAX_BYTES` would be passed: a conversation that grows never
    makes a request the provider refuses (which would fail every later one).
    """
    chosen: set[str] = set()
    total = 0
    for image in reversed(list(images)):
        if len(chosen) >= REQUEST_MAX_IMAGES or total + image.size > REQUEST_MAX_BYTES:
            break
        chosen.add(image.path)
        total += image.size
    return frozenset(chosen)


def unseen_image_text(image: ImageAttachment, reason: str) -> str:
    """The sentence a model reads in place of an image it is not sent.

    Args:
        image: The image.
        reason: Why it is not sent, such as "this model cannot see images".
    """
    what = f"{image.source} is" if image.source else "the file is"
    return f"[{what} {image.describe()}; {reason}.]"


def attachment_for(data: bytes, saved: Path, source: str, max_bytes: int) -> ImageAttachment | None:
    """The attachment for image bytes already saved at ``saved``; None when not to send them.

    The bytes decide, not a declared MIME type: a PNG, JPEG, GIF or WebP with a
    readable header that :func:`image_refusal` lets through.
    """
    fmt = image_format(data[:16])
    dims = image_size(data, fmt) if fmt is not None else None
    if fmt is None or dims is None or image_refusal(dims, len(data), max_bytes) is not None:
        return None
    return ImageAttachment(
        path=str(saved),
        media_type=fmt.media_type,
        width=dims[0],
        height=dims[1],
        size=len(data),
        source=source,
    )
