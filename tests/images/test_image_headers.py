"""Image formats and pixel sizes read from headers (``zuno.contract.images``), each layout of each
format.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from image_bytes import gif, jpeg, png, webp

from zuno.contract.images import (
    ImageAttachment,
    attachment_for,
    image_format,
    image_size,
    newest_images,
)


def _segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


def progressive_jpeg(width: int, height: int) -> bytes:
    """Metadata (two 60 KiB EXIF-like segments, a Huffman table), then a progressive frame."""
    exif = _segment(0xE1, b"Exif\x00\x00" + b"\x00" * 60_000)
    huffman = _segment(0xC4, b"\x00" + b"\x01" * 16 + b"\x02")
    frame = _segment(0xC2, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
    return b"\xff\xd8" + exif + exif + huffman + frame + b"\xff\xd9"


def lossy_webp(width: int, height: int) -> bytes:
    frame = b"\x00\x00\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height) + b"\x00" * 8
    chunk = b"VP8 " + struct.pack("<I", len(frame)) + frame
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def extended_webp(width: int, height: int) -> bytes:
    body = b"\x00" * 4 + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    chunk = b"VP8X" + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


@pytest.mark.parametrize(
    ("data", "media_type", "size"),
    [
        (png(640, 480), "image/png", (640, 480)),
        (gif(300, 2), "image/gif", (300, 2)),
        (jpeg(1920, 1080), "image/jpeg", (1920, 1080)),
        (progressive_jpeg(800, 600), "image/jpeg", (800, 600)),
        (webp(5, 4), "image/webp", (5, 4)),
        (lossy_webp(1024, 768), "image/webp", (1024, 768)),
        (extended_webp(4000, 3000), "image/webp", (4000, 3000)),
    ],
)
def test_format_and_size_come_from_the_bytes(
    data: bytes, media_type: str, size: tuple[int, int]
) -> None:
    fmt = image_format(data)
    assert fmt is not None and fmt.media_type == media_type
    assert image_size(data, fmt) == size


@pytest.mark.parametrize(
    "data",
    [
        b"RIFF\x24\x00\x00\x00WAVEfmt ",  # RIFF, but audio
        b"plain text that names a .png\n",
        b"GIF88a" + b"\x00" * 10,
    ],
)
def test_other_bytes_are_not_images(data: bytes) -> None:
    assert image_format(data) is None


def test_a_cut_header_has_no_size_and_is_not_attached() -> None:
    cut = png(10, 10)[:14]
    fmt = image_format(cut)
    assert fmt is not None and image_size(cut, fmt) is None
    assert attachment_for(cut, Path("/nowhere.png"), "", 1 << 20) is None
    assert attachment_for(png(10, 10), Path("/x.png"), "", 1 << 20) is not None
    assert attachment_for(png(10, 10), Path("/x.png"), "", 10) is None  # over the byte limit
    assert attachment_for(png(8001, 1), Path("/x.png"), "", 1 << 20) is None  # too wide


def test_newest_images_keep_to_the_count_and_the_bytes() -> None:
    def image(n: int, size: int) -> ImageAttachment:
        return ImageAttachment(
            path=f"/a/{n}.png", media_type="image/png", width=1, height=1, size=size
        )

    many = [image(n, 10) for n in range(25)]
    assert newest_images(many) == {f"/a/{n}.png" for n in range(5, 25)}
    heavy = [image(0, 2 << 20), image(1, 9 << 20), image(2, 5 << 20)]
    # The newest two fit in 15 MiB; the oldest would pass it.
    assert newest_images(heavy) == {"/a/1.png", "/a/2.png"}
    heavier = [image(0, 1), image(1, 11 << 20), image(2, 5 << 20)]
    assert newest_images(heavier) == {"/a/2.png"}
