"""JSON-RPC messages framed by ``Content-Length`` headers, as LSP sends them over stdio.

Each message is a header block (``Content-Length: N``, optionally
``Content-Type``, each line ending in CRLF, then an empty line) followed by N
bytes of UTF-8 JSON. :class:`FrameDecoder` is fed bytes in whatever pieces the
pipe delivers and yields each complete message; it keeps partial input between
calls, so reading can stop (be cancelled) between any two chunks without
losing a byte.
"""

from __future__ import annotations

import json
from typing import Any, cast

__all__ = [
    "MAX_MESSAGE_BYTES",
    "FrameDecoder",
    "FramingError",
    "encode_message",
    "json_array",
    "json_object",
]

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""A larger announced body is treated as a broken stream rather than buffered."""

_MAX_HEADER_BYTES = 8192


class FramingError(Exception):
    """The byte stream is not LSP framing (a server writing logs to stdout, say)."""


def json_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (servers' answers vary)."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def json_array(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else an empty one."""
    return cast(list[Any], value) if isinstance(value, list) else []


def encode_message(message: dict[str, Any]) -> bytes:
    """One JSON-RPC message with its ``Content-Length`` header."""
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class FrameDecoder:
    """Incremental decoder: :meth:`feed` bytes, get back the complete messages."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._body_length: int | None = None

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Add ``data`` and return every message now complete, in order."""
        self._buffer += data
        messages: list[dict[str, Any]] = []
        while True:
            if self._body_length is None and not self._read_header():
                return messages
            assert self._body_length is not None
            if len(self._buffer) < self._body_length:
                return messages
            body = bytes(self._buffer[: self._body_length])
            del self._buffer[: self._body_length]
            self._body_length = None
            try:
                message = json.loads(body.decode("utf-8", errors="replace"))
            except json.JSONDecodeError as exc:
                raise FramingError(f"a message body is not JSON: {exc}") from exc
            if isinstance(message, dict):
                messages.append(json_object(message))
            # A batch (a JSON array) is not used by LSP servers; it is skipped.

    def _read_header(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > _MAX_HEADER_BYTES:
                raise FramingError(_describe_garbage(bytes(self._buffer[:80])))
            return False
        header = bytes(self._buffer[:end]).decode("ascii", errors="replace")
        del self._buffer[: end + 4]
        length: int | None = None
        for line in header.split("\r\n"):
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise FramingError(f"bad Content-Length header {line!r}") from None
        if length is None:
            raise FramingError(_describe_garbage(header.encode()[:80]))
        if not 0 <= length <= MAX_MESSAGE_BYTES:
            raise FramingError(f"Content-Length {length} is out of range")
        self._body_length = length
        return True


def _describe_garbage(start: bytes) -> str:
    return (
        "expected a 'Content-Length' header, got "
        f"{start.decode('utf-8', errors='replace')!r}; does the server write logs to stdout?"
    )
