"""Content-Encoding decoded within a cap, however the encodings are stacked.

httpx decodes a body chunk by chunk, but one compressed chunk may inflate to
gigabytes: ``Content-Encoding: gzip, gzip`` on a 1.8 KB body took the process
from 137 MiB to over 2 GiB before the first decoded byte could be counted. Here
every layer inflates at most :data:`PIECE` bytes per step and hands them on
lazily, so a reader that stops at its byte limit stops the decompression too:
memory stays at a few pieces per layer whatever the ratio or the depth.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Protocol

from zuno.contract.tool import ToolError

__all__ = ["ACCEPT_ENCODING", "MAX_LAYERS", "PIECE", "BodyDecoder"]

ACCEPT_ENCODING = "gzip, deflate"
"""The encodings webfetch asks for: the ones it can decode within a cap."""

PIECE = 64 * 1024
"""The most one layer inflates in one step."""

MAX_LAYERS = 4
"""More stacked encodings than this are refused (no server needs them)."""


class _Layer(Protocol):
    def feed(self, data: bytes) -> Iterator[bytes]: ...

    def flush(self) -> Iterator[bytes]: ...


class _Inflate:
    """gzip, or deflate with or without its zlib header, inflated a piece at a time."""

    def __init__(self, name: str) -> None:
        self._name = name
        gzip = name in ("gzip", "x-gzip")
        self._wbits = 16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS
        self._z = zlib.decompressobj(self._wbits)
        self._started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data and not self._z.eof:
            try:
                out = self._z.decompress(data, PIECE)
            except zlib.error as exc:
                if self._started or self._wbits != zlib.MAX_WBITS:
                    what = f"the response's {self._name} encoding is corrupt ({exc})"
                    raise ToolError(what) from None
                # Some servers send raw deflate without the zlib header.
                self._wbits = -zlib.MAX_WBITS
                self._z = zlib.decompressobj(self._wbits)
                continue
            self._started = True
            data = self._z.unconsumed_tail
            if out:
                yield out

    def flush(self) -> Iterator[bytes]:
        rest = self._z.flush()
        if rest:
            yield rest


def _layer(name: str) -> _Layer:
    if name in ("gzip", "x-gzip", "deflate"):
        return _Inflate(name)
    raise ToolError(
        f"the server sent the body encoded as {name!r}, which webfetch cannot decode "
        f"(it asks for {ACCEPT_ENCODING} only)"
    )


class BodyDecoder:
    """Decodes a body by its ``Content-Encoding`` header, lazily and layer by layer."""

    def __init__(self, content_encoding: str) -> None:
        """Prepare the layers named by a ``Content-Encoding`` header ("" for none).

        Raises:
            ToolError: An encoding that cannot be decoded, or too many layers.
        """
        listed = (n.strip().lower() for n in content_encoding.split(","))
        names = [n for n in listed if n not in ("", "identity")]
        if len(names) > MAX_LAYERS:
            raise ToolError(
                f"the body is encoded {len(names)} times over ({content_encoding}); "
                f"webfetch decodes at most {MAX_LAYERS} layers"
            )
        # The last encoding applied is the first to undo.
        self._layers = [_layer(n) for n in reversed(names)]

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of the next raw chunk, a piece at a time."""
        return self._through(0, data)

    def flush(self) -> Iterator[bytes]:
        """What the layers still hold once the raw body has ended."""
        for i, layer in enumerate(self._layers):
            for piece in layer.flush():
                yield from self._through(i + 1, piece)

    def _through(self, index: int, data: bytes) -> Iterator[bytes]:
        if index == len(self._layers):
            if data:
                yield data
            return
        for piece in self._layers[index].feed(data):
            yield from self._through(index + 1, piece)
