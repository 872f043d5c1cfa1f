"""Telling binary content from text by its first bytes (``read`` and ``webfetch`` share it)."""

from __future__ import annotations

__all__ = ["BINARY_SIGNATURES", "binary_signature"]

BINARY_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"RIFF", "RIFF media (WebP, WAV or AVI)"),
    (b"%PDF-", "PDF document"),
    (b"PK\x03\x04", "ZIP archive (or jar, wheel, docx)"),
    (b"\x1f\x8b", "gzip archive"),
    (b"\xfd7zXZ\x00", "xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
    (b"\x28\xb5\x2f\xfd", "zstd archive"),
    (b"\x7fELF", "ELF executable"),
    (b"\xcf\xfa\xed\xfe", "Mach-O executable"),
    (b"\xca\xfe\xba\xbe", "Java class or Mach-O binary"),
    (b"MZ\x90\x00", "Windows executable"),
    (b"\x00asm", "WebAssembly module"),
    (b"SQLite format 3\x00", "SQLite database"),
)
"""Formats whose first bytes may hold no NUL, by their signature."""


def binary_signature(head: bytes) -> str | None:
    """What kind of binary ``head`` (the first few KiB of a file or body) starts.

    Returns:
        A description such as "PNG image" or "binary data (contains NUL bytes)";
        None for what may be text. Byte-order marks are the caller's to check
        first: UTF-16 text holds NUL bytes.
    """
    for signature, kind in BINARY_SIGNATURES:
        if head.startswith(signature):
            return kind
    return "binary data (contains NUL bytes)" if b"\x00" in head else None
