"""Tiny image files made byte by byte, so the tests need no image library.

Each maker returns a file of the named format whose header states ``width``
and ``height``. The PNG and GIF are complete, decodable images; the JPEG and
WebP carry real headers (what ``read`` looks at) with a token body.
``padding`` makes a file bigger without changing what its header says.
"""

from __future__ import annotations

import struct
import zlib

__all__ = ["gif", "jpeg", "png", "webp"]


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def png(width: int = 3, height: int = 2, padding: int = 0) -> bytes:
    """A grey 8-bit PNG; ``padding`` bytes go into a text chunk."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + bytes([0x80]) * width for _ in range(height))
    chunks = _png_chunk(b"IHDR", header)
    if padding:
        chunks += _png_chunk(b"tEXt", b"pad\x00" + b"x" * padding)
    chunks += _png_chunk(b"IDAT", zlib.compress(rows)) + _png_chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunks


def gif(width: int = 1, height: int = 1) -> bytes:
    """A one-colour GIF89a."""
    screen = struct.pack("<HHBBB", width, height, 0x80, 0, 0)
    palette = b"\xff\xff\xff\x00\x00\x00"
    image = b"\x2c" + struct.pack("<HHHHB", 0, 0, width, height, 0)
    return b"GIF89a" + screen + palette + image + b"\x02\x02\x44\x01\x00\x3b"


def jpeg(width: int = 16, height: int = 8) -> bytes:
    """A JFIF header, a comment, a baseline frame header stating the size, then the end."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    comment = b"\xff\xfe" + struct.pack(">H", 7) + b"zuno!"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + comment + sof + b"\xff\xd9"


def webp(width: int = 5, height: int = 4) -> bytes:
    """A lossless (VP8L) WebP header stating the size."""
    bits = (width - 1) | ((height - 1) << 14)
    body = b"\x2f" + bits.to_bytes(4, "little") + b"\x00" * 8
    chunk = b"VP8L" + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk
