"""One fetch: redirects followed hop by hop, and the body streamed within a cap.

Each redirect's target is checked by the network guard before it is
requested. The body is read up to a byte limit; a body declared binary, or
whose first bytes look binary, is not downloaded beyond what told it apart.
Proxies from the environment are not used: the guard must see, and connect to,
the addresses it checked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zuno.config.web import WebSettings
from zuno.contract.tool import ToolError
from zuno.integrations.web._content import (
    SNIFF,
    declared_binary,
    error_excerpt,
    parse_content_type,
    signature,
)
from zuno.integrations.web._decoding import ACCEPT_ENCODING, BodyDecoder
from zuno.integrations.web._guard import check_domain, open_checked
from zuno.integrations.web._http import USER_AGENT, http_failure, status_failure

if TYPE_CHECKING:
    import httpx

__all__ = ["Page", "fetch"]

_REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
_ERROR_BODY = 16 * 1024


@dataclass(slots=True)
class Page:
    """What a fetch brought back, before it is rendered.

    Attributes:
        url: The final URL (after redirects).
        status: The HTTP status (below 400).
        reason: Its reason phrase.
        content_type: The ``Content-Type`` header as sent ("" when absent).
        mime: Its media type, lowercased.
        charset: Its charset, if any.
        body: The bytes downloaded (only the first ones for a binary).
        length: The ``Content-Length``, when the server sent one.
        cut: Whether the download stopped at the limit with more left.
        binary: What kind of binary the body is (None for text).
        redirects: The URLs that redirected here, in order.
    """

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


async def fetch(url: httpx.URL, web: WebSettings, limit: int, accept: str) -> Page:
    """GET ``url``, following redirects within ``web``'s limits.

    The caller checks the first hop's domain and sets the deadline.

    Args:
        url: A URL from :func:`~zuno.integrations.web.parse_url`.
        web: The ``web`` settings (guard, redirects, timeout).
        limit: The most body bytes to download.
        accept: The ``Accept`` header to send.

    Returns:
        The page; its body is at most ``limit`` bytes.

    Raises:
        ArgumentsRejected: The first hop is refused by the network guard.
        ToolError: A redirect is refused, too many redirects, an HTTP 4xx, or
            a failure that will not pass.
        TransientError: An HTTP 5xx (or 408/425/429) or a failure that may pass.
    """
    import httpx  # imported on use: slow to import

    redirects: list[str] = []
    headers = {"User-Agent": USER_AGENT, "Accept": accept, "Accept-Encoding": ACCEPT_ENCODING}
    async with httpx.AsyncClient(
        headers=headers, timeout=web.timeout, follow_redirects=False, trust_env=False
    ) as client:
        while True:
            response = await open_checked(client, url, web, first_hop=not redirects)
            try:
                location = response.headers.get("location")
                if response.status_code in _REDIRECT_STATUS and location:
                    if len(redirects) >= web.max_redirects:
                        raise ToolError(
                            f"stopped after {web.max_redirects} redirects (web.max_redirects) "
                            f"at {url}, which redirects to {location}"
                        )
                    target = _redirect_target(url, location)
                    check_domain(target, web, before_sending=False)
                    redirects.append(str(url))
                    url = target
                    continue
                page = await _read(response, url, limit)
                page.redirects = redirects
                return page
            finally:
                await response.aclose()


def _redirect_target(url: httpx.URL, location: str) -> httpx.URL:
    import httpx  # imported on use: slow to import

    try:
        target = url.join(location)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ToolError(f"{url} redirects to an invalid URL {location!r} ({exc})") from None
    if target.scheme not in ("http", "https") or not target.host:
        raise ToolError(f"{url} redirects to {location!r}; webfetch follows http(s) redirects only")
    return target


async def _read(response: httpx.Response, url: httpx.URL, limit: int) -> Page:
    import httpx  # imported on use: slow to import

    content_type = response.headers.get("content-type", "")
    mime, charset = parse_content_type(content_type)
    length_header = response.headers.get("content-length", "")
    page = Page(
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
                error_excerpt(body, mime, charset, str(url)),
                response.headers.get("retry-after"),
            )
        if declared_binary(mime):
            page.body, _ = await _take(response, SNIFF, None)
            page.binary = signature(page.body) or mime
            return page
        sniffed: list[str | None] = []

        def sniff(head: bytes) -> bool:
            sniffed.append(signature(head))
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
    """Up to ``limit`` decoded body bytes, and whether more were left unread.

    The body is read raw and decoded here (:class:`BodyDecoder`), so the cap
    bounds the decoded size, not only what came over the wire. ``stop`` sees
    the first bytes (at least :data:`SNIFF` of them, or the whole body when
    shorter) once, and ends the download when it says so.
    """
    decoder = BodyDecoder(response.headers.get("content-encoding", ""))
    body = bytearray()
    sniffed = stop is None
    pieces = _decoded(response, decoder)
    async for piece in pieces:
        body += piece
        if not sniffed and len(body) >= SNIFF:
            sniffed = True
            if stop is not None and stop(bytes(body[:SNIFF])):
                return bytes(body[:SNIFF]), True
        if len(body) >= limit:
            more = len(body) > limit or await _has_more(pieces)
            return bytes(body[:limit]), more
    if not sniffed and stop is not None and stop(bytes(body)):
        return bytes(body[:SNIFF]), False
    return bytes(body), False


async def _decoded(response: httpx.Response, decoder: BodyDecoder) -> AsyncIterator[bytes]:
    async for raw in response.aiter_raw():
        for piece in decoder.feed(raw):
            yield piece
    for piece in decoder.flush():
        yield piece


async def _has_more(pieces: AsyncIterator[bytes]) -> bool:
    async for piece in pieces:
        if piece:
            return True
    return False
