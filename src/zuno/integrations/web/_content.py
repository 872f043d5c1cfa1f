"""What a body is: content types, binary signatures, and decoding to text.

Text is decoded by the BOM, the ``Content-Type`` charset, the page's
``<meta>`` charset, then UTF-8 with a windows-1252 fallback. A binary is told
by its declared type or, when the type says nothing, by its first bytes.
"""

from __future__ import annotations

import codecs
import re

from zuno.core.signatures import binary_signature

__all__ = [
    "SNIFF",
    "declared_binary",
    "decode",
    "error_excerpt",
    "parse_content_type",
    "signature",
]

SNIFF = 8192
"""Bytes looked at to tell a binary body from text."""

_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-javascript",
        "application/x-sh",
        "application/sql",
        "application/graphql",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/x-www-form-urlencoded",
        "application/xhtml+xml",
    }
)
_BINARY_TYPES = frozenset(
    {
        "application/pdf",
        "application/zip",
        "application/gzip",
        "application/x-gzip",
        "application/x-tar",
        "application/x-7z-compressed",
        "application/x-bzip2",
        "application/x-xz",
        "application/zstd",
        "application/wasm",
        "application/msword",
        "application/x-msdownload",
        "application/java-archive",
        "application/vnd.sqlite3",
    }
)
_BOMS: tuple[tuple[bytes, str], ...] = (
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
# Labels browsers read as windows-1252 (WHATWG Encoding): the same decoding here.
_AS_WINDOWS_1252 = frozenset({"ascii", "iso8859-1", "latin-1"})


def parse_content_type(value: str) -> tuple[str, str | None]:
    """The media type of a ``Content-Type`` header, lowercased, and its charset.

    Args:
        value: The header ("" when there is none).

    Returns:
        ``(mime, charset)``; the charset is None when the header names none.
    """
    mime, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset":
            charset = val.strip().strip("\"'") or None
    return mime.strip().lower(), charset


def _textual(mime: str) -> bool:
    return mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml"))


def declared_binary(mime: str) -> bool:
    """Whether a media type says the body is not text (images, archives, ...).

    Args:
        mime: The lowercased media type.

    Returns:
        True when the type is a known binary one.
    """
    if _textual(mime):
        return False
    if mime.startswith(("image/", "audio/", "video/", "font/", "model/")):
        return True
    return mime in _BINARY_TYPES or mime.startswith(
        ("application/vnd.openxmlformats", "application/vnd.ms-", "application/vnd.oasis")
    )


def _bom(head: bytes) -> str | None:
    return next((name for bom, name in _BOMS if head.startswith(bom)), None)


def signature(head: bytes) -> str | None:
    """What kind of binary ``head`` starts.

    Args:
        head: The first bytes of a body (:data:`SNIFF` of them, or all when shorter).

    Returns:
        A description such as "PNG image", or None for text.
    """
    if _bom(head):
        return None
    return binary_signature(head)


def _text_codec(label: str | None) -> str | None:
    """The Python codec for a charset label, or None when it is not a text encoding."""
    if not label:
        return None
    try:
        name = codecs.lookup(label).name
        b"".decode(name)  # refuses bytes-to-bytes codecs such as base64
    except (LookupError, ValueError):
        return None
    return "cp1252" if name in _AS_WINDOWS_1252 else name


def decode(body: bytes, charset: str | None, html: bool, cut: bool) -> tuple[str, str]:
    """The text of ``body`` and the encoding used to decode it.

    Args:
        body: The bytes received.
        charset: The ``Content-Type`` charset, if any.
        html: Whether the body may be HTML (its ``<meta>`` charset is then read).
        cut: Whether the download stopped early (a partial last character is
            then not an error).

    Returns:
        ``(text, encoding)``; undecodable bytes become U+FFFD.
    """
    encoding = _bom(body) or _text_codec(charset)
    if encoding is None and html:
        match = _META_CHARSET.search(body[:4096])
        encoding = _text_codec(match.group(1).decode("ascii")) if match else None
    if encoding is None:
        try:
            codecs.getincrementaldecoder("utf-8")().decode(body, final=not cut)
            encoding = "utf-8"
        except UnicodeDecodeError:
            encoding = "cp1252"
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    return decoder.decode(body, final=not cut), encoding


def error_excerpt(body: bytes, mime: str, charset: str | None, url: str) -> str:
    """The start of an error page, as one short line of text.

    Args:
        body: The start of the error body.
        mime: Its media type.
        charset: Its ``Content-Type`` charset, if any.
        url: Where it came from (for resolving links in HTML).

    Returns:
        At most 300 characters of its text; "" when it is empty or binary.
    """
    # Imported on use: the HTML converter is needed for an error page, not to list tools.
    from zuno.integrations.html_text import html_to_text, looks_like_html

    if not body or signature(body[:SNIFF]):
        return ""
    text, _ = decode(body, charset, mime == "text/html", cut=True)
    if mime in ("text/html", "application/xhtml+xml") or looks_like_html(text[:1024]):
        text = html_to_text(text, url, markdown=False).text.split("\n\nLinks:\n", 1)[0]
    line = " ".join(text.split())
    return line if len(line) <= 300 else line[:297] + "..."
