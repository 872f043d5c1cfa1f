"""Files as a language server sees them: URIs, positions, and opened documents.

LSP positions are 0-based lines and UTF-16 code-unit offsets; Zuno speaks
1-based lines and columns counted in characters (code points). The
conversions here are the only place the two meet.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = [
    "OpenDocument",
    "path_to_uri",
    "read_source",
    "to_character",
    "to_utf16",
    "uri_to_path",
]

MAX_SOURCE_BYTES = 8 * 1024 * 1024
"""A larger file is not sent to a server (nor quoted in results)."""


@dataclass(slots=True)
class OpenDocument:
    """A file the server was told about with ``didOpen``, as it was last sent."""

    uri: str
    language_id: str
    version: int
    text: str
    stamp: tuple[int, int]
    """(mtime in ns, size) of the file when it was last read."""
    published_before: int
    """The diagnostics counter when this version was sent (see ``LspClient``)."""
    others_changed_at: int | None = None
    """The diagnostics counter when changes to other files were last reported, which
    may change this file's diagnostics without a new version."""


def path_to_uri(path: Path) -> str:
    """The ``file://`` URI of an absolute path."""
    return path.as_uri()


def uri_to_path(uri: str) -> Path | None:
    """The path of a ``file://`` URI, or None for other schemes."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


def read_source(path: Path) -> str:
    """A source file's text (invalid UTF-8 replaced); OSError when it cannot be read."""
    size = path.stat().st_size
    if size > MAX_SOURCE_BYTES:
        raise OSError(f"it is larger than {MAX_SOURCE_BYTES} bytes")
    return path.read_bytes().decode("utf-8", errors="replace")


def to_utf16(line_text: str, column: int) -> int:
    """The UTF-16 offset of a 1-based character column in ``line_text``."""
    prefix = line_text[: max(0, column - 1)]
    return len(prefix.encode("utf-16-le")) // 2


def to_character(line_text: str, utf16_offset: int) -> int:
    """The 1-based character column of a UTF-16 offset in ``line_text``."""
    units = 0
    for index, char in enumerate(line_text):
        if units >= utf16_offset:
            return index + 1
        units += 2 if ord(char) > 0xFFFF else 1
    return len(line_text) + 1
