"""The ``webfetch`` tool: one http(s) URL, read as markdown, plain text or raw.

A fetch is a plain inspection (ReadOnly / Safe / ParallelSafe): it is never
prompted in strict mode, and the dispatcher may attempt it again after a
transient failure. How failures are classified::

    bad URL, refused scheme, domain or address    ArgumentsRejected (nothing was sent)
    HTTP 4xx, TLS failure, unknown host           ToolError
    HTTP 5xx, 408, 425, 429, timeout, lost link   TransientError (retried after backoff)

Reaching the network is guarded. Every hop (the URL and each redirect) is
checked against ``web.allowed_domains`` and ``web.blocked_domains``, its host
is resolved here, and unless ``web.allow_private_networks`` is set every
address must be public (no loopback, private, link-local, shared or reserved
ranges). The connection then goes to an address that was checked, with the
original name as ``Host`` and TLS server name, so a second DNS answer cannot
point the request somewhere else (DNS rebinding). Proxies from the environment
are not used, for the same reason.

The body is streamed and capped (``web.max_download_bytes``, or a smaller
``max_bytes``); the whole fetch has one deadline (``web.timeout``). Text is
decoded by the BOM, the ``Content-Type`` charset, the page's ``<meta>`` charset,
then UTF-8 with a windows-1252 fallback. HTML is made readable by
:mod:`zuno.html_text`; images, PDFs and other binaries are described, never
shown. The result is bounded by the tool output limits, the whole text kept as
an artifact the ``read`` tool can open.
"""

from __future__ import annotations

import codecs
import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import anyio
import anyio.to_thread
import httpx
from pydantic import Field

from zuno.declarations import READ_ONLY_SAFE_PARALLEL
from zuno.html_text import html_to_text, looks_like_html
from zuno.output import OutputLimits, bound_text, format_size
from zuno.tool import (
    ArgumentsRejected,
    Tool,
    ToolArgs,
    ToolContext,
    ToolError,
    ToolResult,
    TransientError,
)
from zuno.web_settings import MAX_DOWNLOAD_CEILING, WebSettings, domain_matches

__all__ = [
    "USER_AGENT",
    "WebFetchArgs",
    "WebFetchTool",
    "http_failure",
    "room_for_marker",
    "status_failure",
]

USER_AGENT = "Zuno (coding agent tool runtime; webfetch)"
"""The User-Agent of every request the web tools send."""

Format = Literal["markdown", "text", "raw"]

_REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
_TRANSIENT_STATUS = frozenset({408, 425, 429})
_SNIFF = 8192
_ERROR_BODY = 16 * 1024
_ADDRESSES_TRIED = 3
_ACCEPT: dict[str, str] = {
    "markdown": "text/markdown, text/html;q=0.9, application/xhtml+xml;q=0.9, "
    "text/plain;q=0.8, */*;q=0.5",
    "text": "text/html, application/xhtml+xml, text/plain;q=0.9, */*;q=0.5",
    "raw": "*/*",
}
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
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"RIFF", "RIFF media (WebP, WAV or AVI)"),
    (b"%PDF-", "PDF document"),
    (b"PK\x03\x04", "ZIP archive (or jar, wheel, docx)"),
    (b"\x1f\x8b", "gzip archive"),
    (b"\xfd7zXZ\x00", "xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
    (b"\x28\xb5\x2f\xfd", "zstd archive"),
    (b"\x7fELF", "ELF executable"),
    (b"MZ", "Windows executable"),
    (b"\x00asm", "WebAssembly module"),
    (b"SQLite format 3\x00", "SQLite database"),
    (b"\x00\x00\x00", "binary data"),
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


class WebFetchArgs(ToolArgs):
    """Arguments of ``webfetch``."""

    url: str = Field(
        min_length=1,
        max_length=8192,
        description="The http:// or https:// URL to fetch.",
    )
    format: Format = Field(
        default="markdown",
        description=(
            "markdown (default): HTML converted to markdown, links numbered and listed at "
            "the end; text: the same as plain text; raw: the body as received (HTML "
            "source). Other text (JSON, plain text, code) is returned as is."
        ),
    )
    max_bytes: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DOWNLOAD_CEILING,
        description=(
            "Stop downloading the body after this many bytes. Default and ceiling: the "
            "configured download limit (5 MiB unless configured)."
        ),
    )


@dataclass(slots=True)
class _Page:
    """What a fetch brought back, before it is rendered."""

    url: httpx.URL
    status: int
    reason: str
    content_type: str
    mime: str
    charset: str | None
    body: bytes = b""
    length: int | None = None
    cut: bool = False
    binary: str | None = None
    redirects: list[str] = field(default_factory=lambda: [])


class WebFetchTool(Tool[WebFetchArgs]):
    """Fetch one URL and return it as readable text."""

    name = "webfetch"
    description = (
        "Fetch one http(s) URL and return its content: HTML as markdown (default) or "
        "plain text with numbered links, or the raw body; JSON and other text as is. "
        "Follows up to 5 redirects and names the final URL. Limits (defaults; zuno.json "
        "web.*): 30 s per fetch, 5 MiB downloaded (lower with max_bytes; the output says "
        "when the body was cut). Images, PDFs and other binaries are described, not "
        "shown. Loopback and private-network addresses are refused unless configured. "
        "Output is capped by the tool output limits; the full text is saved to a file "
        "the read tool can open. HTTP 4xx is an error to act on; 5xx and timeouts are "
        "retried by the runtime."
    )
    args_model = WebFetchArgs
    declaration = READ_ONLY_SAFE_PARALLEL
    rule_argument = "url"
    rule_match = "glob"

    async def run(self, args: WebFetchArgs, ctx: ToolContext) -> ToolResult:
        """Fetch ``args.url`` within the configured limits and render it."""
        web = ctx.config.web
        url = _parse_url(args.url)
        _check_domain(url, web, before_sending=True)
        limit = min(args.max_bytes or web.max_download_bytes, web.max_download_bytes)
        try:
            with anyio.fail_after(web.timeout):
                page = await _fetch(url, web, limit, args.format)
        except TimeoutError:
            raise TransientError(
                f"fetching {args.url} did not finish within {web.timeout:g} s (web.timeout); "
                "the site may be slow or down"
            ) from None
        if page.binary is not None:
            return _describe_binary(page, args.url)
        text, title = await anyio.to_thread.run_sync(
            _render, page, args.format, abandon_on_cancel=True
        )
        bounded = bound_text(
            text, room_for_marker(ctx.limits), lambda: ctx.artifact_path("webfetch")
        )
        return ToolResult(
            output=bounded.text,
            data={
                "url": args.url,
                "final_url": str(page.url),
                "redirects": page.redirects,
                "status": page.status,
                "content_type": page.content_type,
                "bytes": len(page.body),
                "download_cut": page.cut,
                "format": args.format,
                "title": title,
            },
            artifact=bounded.artifact,
        )


# --- URLs and the network guard ------------------------------------------------------


def _parse_url(raw: str) -> httpx.URL:
    text = raw.strip()
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ArgumentsRejected(f"{raw!r} is not a valid URL ({exc})") from None
    if url.scheme not in ("http", "https"):
        if not url.scheme and not text.startswith("/"):
            raise ArgumentsRejected(
                f"{raw!r} has no scheme; webfetch takes http:// or https:// URLs "
                f"(did you mean https://{text}?)"
            )
        raise ArgumentsRejected(
            f"the {url.scheme or 'empty'} scheme is not supported; webfetch takes http:// "
            "or https:// URLs only (use the read tool for local files)"
        )
    if not url.host:
        raise ArgumentsRejected(f"{raw!r} has no host name")
    return url


def _check_domain(url: httpx.URL, web: WebSettings, *, before_sending: bool) -> None:
    """Refuse a host the domain lists exclude (a redirect's refusal is an error)."""
    refuse = ArgumentsRejected if before_sending else ToolError
    host = url.host
    where = "" if before_sending else f" (a redirect to {url})"
    if web.blocked_domains and domain_matches(host, web.blocked_domains):
        raise refuse(f"{host}{where} is in web.blocked_domains; webfetch does not reach it")
    if web.allowed_domains and not domain_matches(host, web.allowed_domains):
        allowed = ", ".join(web.allowed_domains)
        raise refuse(
            f"{host}{where} is not in web.allowed_domains ({allowed}); webfetch reaches "
            "only those domains and their subdomains"
        )


def _address_kind(address: str) -> str | None:
    """Why an address is not public (None when it is)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    checks = (
        (ip.is_loopback, "loopback"),
        (ip.is_unspecified, "unspecified"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (ip.is_private, "private-network"),
        (ip.is_reserved, "reserved"),
        (not ip.is_global, "non-public"),
    )
    return next((kind for bad, kind in checks if bad), None)


async def _resolve(url: httpx.URL) -> list[str]:
    host = url.raw_host.decode("ascii")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
            raise ToolError(
                f"cannot resolve host {url.host!r}: no such host; check the URL"
            ) from None
        raise TransientError(f"cannot resolve host {url.host!r}: {exc.strerror}") from None
    except (OSError, UnicodeError) as exc:
        raise ToolError(f"cannot resolve host {url.host!r}: {exc}") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise ToolError(f"cannot resolve host {url.host!r}: no addresses")
    return addresses


async def _open(
    client: httpx.AsyncClient, url: httpx.URL, web: WebSettings, first_hop: bool
) -> httpx.Response:
    """Send the request to a checked address of ``url``'s host; the response streams."""
    addresses = await _resolve(url)
    if not web.allow_private_networks:
        for address in addresses:
            kind = _address_kind(address)
            if kind is not None:
                refuse = ArgumentsRejected if first_hop else ToolError
                via = "" if first_hop else f" (reached by a redirect to {url})"
                raise refuse(
                    f"{url.host} resolves to {address}, a {kind} address{via}; webfetch "
                    "reaches public addresses only. To allow local and private "
                    'networks, set "web": {"allow_private_networks": true} in zuno.json'
                )
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    headers = {"Host": url.netloc.decode("ascii")}
    failure: httpx.HTTPError | None = None
    for address in addresses[:_ADDRESSES_TRIED]:
        pinned = url.copy_with(host=address.split("%", 1)[0], fragment=None)
        request = client.build_request("GET", pinned, headers=headers, extensions=extensions)
        try:
            return await client.send(request, stream=True)
        except httpx.ConnectError as exc:
            failure = exc
            if _tls_failure(exc):
                break  # the same certificate would come from every address
        except httpx.HTTPError as exc:
            failure = exc
            break
    assert failure is not None
    raise http_failure(failure, str(url)) from None


# --- fetching --------------------------------------------------------------------


async def _fetch(url: httpx.URL, web: WebSettings, limit: int, fmt: str) -> _Page:
    redirects: list[str] = []
    headers = {"User-Agent": USER_AGENT, "Accept": _ACCEPT[fmt]}
    async with httpx.AsyncClient(
        headers=headers, timeout=web.timeout, follow_redirects=False, trust_env=False
    ) as client:
        while True:
            response = await _open(client, url, web, first_hop=not redirects)
            try:
                location = response.headers.get("location")
                if response.status_code in _REDIRECT_STATUS and location:
                    if len(redirects) >= web.max_redirects:
                        raise ToolError(
                            f"stopped after {web.max_redirects} redirects (web.max_redirects) "
                            f"at {url}, which redirects to {location}"
                        )
                    target = _redirect_target(url, location)
                    _check_domain(target, web, before_sending=False)
                    redirects.append(str(url))
                    url = target
                    continue
                page = await _read(response, url, limit)
                page.redirects = redirects
                return page
            finally:
                await response.aclose()


def _redirect_target(url: httpx.URL, location: str) -> httpx.URL:
    try:
        target = url.join(location)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ToolError(f"{url} redirects to an invalid URL {location!r} ({exc})") from None
    if target.scheme not in ("http", "https") or not target.host:
        raise ToolError(f"{url} redirects to {location!r}; webfetch follows http(s) redirects only")
    return target


async def _read(response: httpx.Response, url: httpx.URL, limit: int) -> _Page:
    content_type = response.headers.get("content-type", "")
    mime, charset = _parse_content_type(content_type)
    length_header = response.headers.get("content-length", "")
    page = _Page(
        url=url,
        status=response.status_code,
        reason=response.reason_phrase,
        content_type=content_type,
        mime=mime,
        charset=charset,
        length=int(length_header) if length_header.isdigit() else None,
    )
    try:
        if page.status >= 400:
            body, _ = await _take(response, _ERROR_BODY, None)
            raise status_failure(
                page.status,
                page.reason,
                str(url),
                _excerpt(body, mime, charset, str(url)),
                response.headers.get("retry-after"),
            )
        if _declared_binary(mime):
            page.body, _ = await _take(response, _SNIFF, None)
            page.binary = _signature(page.body) or mime
            return page
        sniffed: list[str | None] = []

        def sniff(head: bytes) -> bool:
            sniffed.append(_signature(head))
            return sniffed[0] is not None

        page.body, page.cut = await _take(response, limit, sniff)
        if sniffed and sniffed[0] is not None:
            page.binary = sniffed[0]
            page.cut = False
        return page
    except httpx.HTTPError as exc:
        raise http_failure(exc, str(url)) from None


async def _take(
    response: httpx.Response, limit: int, stop: Callable[[bytes], bool] | None
) -> tuple[bytes, bool]:
    """Up to ``limit`` body bytes, and whether more were left unread.

    ``stop`` sees the first bytes (at least :data:`_SNIFF` of them, or the whole
    body when shorter) once, and ends the download when it says so.
    """
    body = bytearray()
    sniffed = stop is None
    async for chunk in response.aiter_bytes():
        body += chunk
        if not sniffed and len(body) >= _SNIFF:
            sniffed = True
            if stop is not None and stop(bytes(body[:_SNIFF])):
                return bytes(body[:_SNIFF]), True
        if len(body) >= limit:
            more = len(body) > limit or await _has_more(response)
            return bytes(body[:limit]), more
    if not sniffed and stop is not None and stop(bytes(body)):
        return bytes(body[:_SNIFF]), False
    return bytes(body), False


async def _has_more(response: httpx.Response) -> bool:
    async for chunk in response.aiter_bytes():
        if chunk:
            return True
    return False


# --- content types and decoding ------------------------------------------------------


def _parse_content_type(value: str) -> tuple[str, str | None]:
    mime, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset":
            charset = val.strip().strip("\"'") or None
    return mime.strip().lower(), charset


def _textual(mime: str) -> bool:
    return mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml"))


def _declared_binary(mime: str) -> bool:
    if _textual(mime):
        return False
    if mime.startswith(("image/", "audio/", "video/", "font/", "model/")):
        return True
    return mime in _BINARY_TYPES or mime.startswith(
        ("application/vnd.openxmlformats", "application/vnd.ms-", "application/vnd.oasis")
    )


def _bom(head: bytes) -> str | None:
    return next((name for bom, name in _BOMS if head.startswith(bom)), None)


def _signature(head: bytes) -> str | None:
    """What kind of binary ``head`` starts (None for text)."""
    if _bom(head):
        return None
    for signature, kind in _SIGNATURES:
        if head.startswith(signature):
            return kind
    return "binary data (contains NUL bytes)" if b"\x00" in head else None


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


def _decode(body: bytes, charset: str | None, html: bool, cut: bool) -> tuple[str, str]:
    """The text of ``body`` and the encoding used to decode it."""
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


def _is_html(page: _Page, text: str) -> bool:
    if page.mime in ("text/html", "application/xhtml+xml"):
        return True
    return page.mime in ("", "application/octet-stream") and looks_like_html(text[:1024])


def _excerpt(body: bytes, mime: str, charset: str | None, url: str) -> str:
    """The start of an error page, as one short line of text."""
    if not body or _signature(body[:_SNIFF]):
        return ""
    text, _ = _decode(body, charset, mime == "text/html", cut=True)
    if mime in ("text/html", "application/xhtml+xml") or looks_like_html(text[:1024]):
        text = html_to_text(text, url, markdown=False).text.split("\n\nLinks:\n", 1)[0]
    line = " ".join(text.split())
    return line if len(line) <= 300 else line[:297] + "..."


# --- rendering -----------------------------------------------------------------------


def _render(page: _Page, fmt: Format) -> tuple[str, str]:
    """The model-visible text of a page, and its title."""
    text, encoding = _decode(page.body, page.charset, _is_html_mime(page), page.cut)
    title = ""
    converted = ""
    if fmt != "raw" and _is_html(page, text):
        doc = html_to_text(text, str(page.url), markdown=fmt == "markdown")
        text, title = doc.text, doc.title
        converted = f", converted to {fmt}"
        if doc.main_only:
            converted += " (main content only)"
        if not text:
            text = (
                "(The page has no readable text without JavaScript; it is probably built "
                "by scripts. format=raw shows its HTML source.)"
            )
    elif not text.strip():
        text = "(The response body is empty.)"
    lines = [f"URL: {page.url}"]
    if page.redirects:
        lines.append(f"Redirected from: {' -> '.join(page.redirects)}")
    if page.status != 200:
        lines.append(f"Status: {page.status} {page.reason}")
    if title:
        lines.append(f"Title: {title}")
    shown_type = page.mime or "unknown type"
    lines.append(f"Content: {shown_type} ({encoding}), {format_size(len(page.body))}{converted}")
    if page.cut:
        of = f" of {format_size(page.length)}" if page.length else ""
        lines.append(
            f"[Download stopped at {format_size(len(page.body))}{of}: the rest of the body "
            f"was not fetched. Pass a larger max_bytes (the configured limit is the "
            "ceiling) to see more.]"
        )
    return "\n".join(lines) + "\n\n" + text, title


def _is_html_mime(page: _Page) -> bool:
    return page.mime in ("text/html", "application/xhtml+xml", "", "application/octet-stream")


def _describe_binary(page: _Page, asked: str) -> ToolResult:
    size = format_size(page.length) if page.length is not None else "size unknown"
    what = page.mime or "no content type"
    if page.binary and page.binary != page.mime:
        what = f"{what}; looks like {page.binary}"
    lines = [f"URL: {page.url}"]
    if page.redirects:
        lines.append(f"Redirected from: {' -> '.join(page.redirects)}")
    lines.append(
        f"Not text: {what}, {size}. webfetch shows text only, so the body was not "
        "downloaded. To keep the file, download it with the shell tool (for example "
        "`curl -L -o FILE URL`), if that is allowed."
    )
    return ToolResult(
        output="\n".join(lines),
        data={
            "url": asked,
            "final_url": str(page.url),
            "redirects": page.redirects,
            "status": page.status,
            "content_type": page.content_type,
            "binary": page.binary,
            "length": page.length,
        },
    )


def room_for_marker(limits: OutputLimits) -> OutputLimits:
    """Limits that leave room for the truncation marker :func:`bound_text` adds.

    A cut text is the head, a marker naming the artifact and the tail; sized to
    the full limits it would exceed them by the marker, and the dispatcher's
    own bound would cut it again and point at a copy of the cut text instead
    of the whole page.
    """
    reserve = min(1024, limits.max_bytes // 4)
    return OutputLimits(limits.max_bytes - reserve, max(1, limits.max_lines - 4))


# --- failures ----------------------------------------------------------------------


def _tls_failure(exc: httpx.HTTPError) -> bool:
    text = str(exc)
    return "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text or "TLS" in text


def http_failure(exc: httpx.HTTPError, what: str) -> ToolError:
    """The error a transport failure of a request for ``what`` means to the model."""
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return TransientError(f"{what}: timed out ({type(exc).__name__})")
    if isinstance(exc, httpx.ConnectError):
        if _tls_failure(exc):
            trust = (
                "; the server's certificate is not trusted for this name"
                if "CERTIFICATE_VERIFY_FAILED" in detail
                else ""
            )
            return ToolError(f"{what}: TLS failure ({detail}){trust}")
        return TransientError(f"{what}: cannot connect ({detail})")
    if isinstance(exc, httpx.DecodingError):
        return ToolError(f"{what}: the response could not be decoded ({detail})")
    if isinstance(exc, (httpx.NetworkError, httpx.RemoteProtocolError)):
        return TransientError(f"{what}: the connection failed ({detail})")
    return ToolError(f"{what}: request failed ({detail})")


def status_failure(
    status: int, reason: str, what: str, excerpt: str = "", retry_after: str | None = None
) -> ToolError:
    """The error an HTTP error status means: 5xx and 408/425/429 may pass, 4xx will not."""
    message = f"HTTP {status} {reason} from {what}"
    if excerpt:
        message += f": {excerpt}"
    if status >= 500 or status in _TRANSIENT_STATUS:
        wait = f" (the server asks to wait {retry_after} s)" if retry_after else ""
        return TransientError(f"{message}. This may pass; try again later{wait}.")
    if status == 404:
        message += ". Check the URL"
    elif status in (401, 403):
        message += ". The site refuses access (it may need a login or block automated clients)"
    return ToolError(message)
