"""The ``webfetch`` tool: one http(s) URL, read as markdown, plain text or raw.

A fetch is a plain inspection (ReadOnly / Safe / ParallelSafe), and the
dispatcher may attempt it again after a transient failure. It sends its URL
out, though: in strict mode a fetch from a host ``web.allowed_domains`` does not
list is asked about, and approving it for the session covers that host.
Permission rules match the host (``{"tool": "webfetch", "pattern":
"docs.python.org", "action": "allow"}``). How failures are classified::

    bad URL, refused scheme, domain or address    ArgumentsRejected (nothing was sent)
    HTTP 4xx, TLS failure, unknown host           ToolError
    HTTP 5xx, 408, 425, 429, lost link            TransientError (retried after backoff)
    no answer within web.timeout                 ToolError (the deadline covers every attempt)

Reaching the network is guarded and capped by :mod:`zuno.integrations.web`: every hop is
checked against the domain lists and, unless ``web.allow_private_networks`` is
set, must resolve to public addresses only; the connection goes to a checked
address. The body is streamed and capped (``web.max_download_bytes``, or a
smaller ``max_bytes``); the whole fetch has one deadline (``web.timeout``).

This module renders what came back: HTML is made readable by
:mod:`zuno.integrations.html_text`; images, PDFs and other binaries are described, never
shown. The result is bounded by the tool output limits, the whole text kept as
an artifact the ``read`` tool can open.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import anyio
import anyio.to_thread
from pydantic import Field

from zuno.config.web import MAX_DOWNLOAD_CEILING, WebSettings, domain_matches
from zuno.contract.output import OutputLimits, bound_text, format_size
from zuno.contract.tool import ArgumentsRejected, Tool, ToolArgs, ToolContext, ToolError, ToolResult
from zuno.core.declarations import READ_ONLY_SAFE_PARALLEL
from zuno.integrations.web import Page, check_domain, decode, fetch, parse_url

if TYPE_CHECKING:
    import httpx

    from zuno.config.loading import Config

__all__ = ["WebFetchArgs", "WebFetchTool", "room_for_marker"]

Format = Literal["markdown", "text", "raw"]

_ACCEPT: dict[str, str] = {
    "markdown": "text/markdown, text/html;q=0.9, application/xhtml+xml;q=0.9, "
    "text/plain;q=0.8, */*;q=0.5",
    "text": "text/html, application/xhtml+xml, text/plain;q=0.9, */*;q=0.5",
    "raw": "*/*",
}


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

    def rule_subject(self, args: WebFetchArgs, workspace: Path) -> str | None:
        """The host the fetch goes to (lower case): rules name hosts, ``*.python.org``.

        A URL that does not parse is matched as written (the fetch refuses it anyway).
        """
        return _host(args.url) or args.url

    def strict_reason(self, args: WebFetchArgs, config: Config) -> str | None:
        """A fetch sends the URL to its host: in strict mode an unlisted host is asked about.

        Hosts the fetch refuses anyway (blocked, missing from a non-empty
        ``web.allowed_domains``, a private address literal) are not asked about.
        """
        host = _host(args.url)
        web = config.web
        if host is None or web.allowed_domains or domain_matches(host, web.blocked_domains):
            return None
        if not web.allow_private_networks and _private_address(host):
            return None  # refused by the fetch's address check: nothing to ask
        return (
            f"webfetch sends a request to {host}, which web.allowed_domains does not list "
            "(the URL could carry data out)"
        )

    def session_scope(self, args: WebFetchArgs) -> tuple[str, str] | None:
        """Approving a fetch for the session approves every fetch from its host."""
        host = _host(args.url)
        return None if host is None else (f"host:{host}", f"fetches from {host}")

    async def run(self, args: WebFetchArgs, ctx: ToolContext) -> ToolResult:
        """Fetch ``args.url`` within the configured limits and render it."""
        web = ctx.config.web
        url = parse_url(args.url)
        check_domain(url, web, before_sending=True)
        hops = _redirect_scope(url, web, ctx)
        limit = min(args.max_bytes or web.max_download_bytes, web.max_download_bytes)
        try:
            with anyio.fail_after(web.timeout):
                page = await fetch(url, hops, limit, _ACCEPT[args.format])
        except ToolError as exc:
            if hops is not web and all(part in str(exc) for part in _REDIRECT_REFUSED):
                raise ToolError(
                    f"{args.url} redirected to another host; in strict mode a fetch follows "
                    f"redirects only within {url.host} (and its subdomains), the host it was "
                    "allowed for. Fetch the target URL directly if it is needed (it is asked "
                    "about like any other)"
                ) from None
            raise
        except TimeoutError:
            # Final, not transient: web.timeout bounds the whole fetch, and another
            # attempt would run past it.
            raise ToolError(
                f"fetching {args.url} did not finish within {web.timeout:g} s (web.timeout); "
                "the site may be slow or down. Not retried: try a smaller page or later"
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


_REDIRECT_REFUSED = ("(a redirect to ", "is not in web.allowed_domains")
"""What :func:`zuno.integrations.web.check_domain` says of a redirect to a host the domain list
lacks.
"""


def _redirect_scope(url: httpx.URL, web: WebSettings, ctx: ToolContext) -> WebSettings:
    """The settings redirects are checked against: unless permissive, only the fetched host.

    Strict mode asked about (or a rule allowed) one host. A redirect elsewhere
    would carry what the URL holds to a host nobody approved (an open redirect
    on an approved site), so it is refused. ``web.allowed_domains``, when set,
    already bounds every hop; permissive mode follows redirects anywhere.
    """
    permissions = ctx.permissions
    if web.allowed_domains or permissions is None or permissions.mode == "permissive":
        return web
    return web.model_copy(update={"allowed_domains": [url.host.lower().rstrip(".")]})


def _host(url: str) -> str | None:
    """The host a URL names, lower case and without a trailing dot; None if it is not a URL."""
    try:
        host = parse_url(url).host
    except ArgumentsRejected:
        return None
    return host.lower().rstrip(".") or None


def _private_address(host: str) -> bool:
    """Whether ``host`` is an IP address outside the public internet (names are not resolved)."""
    try:
        return not ipaddress.ip_address(host.strip("[]").split("%", 1)[0]).is_global
    except ValueError:
        return False


def _is_html(page: Page, text: str) -> bool:
    from zuno.integrations.html_text import (
        looks_like_html,  # imported on use: listing tools needs none
    )

    if page.mime in ("text/html", "application/xhtml+xml"):
        return True
    return page.mime in ("", "application/octet-stream") and looks_like_html(text[:1024])


def _is_html_mime(page: Page) -> bool:
    return page.mime in ("text/html", "application/xhtml+xml", "", "application/octet-stream")


def _render(page: Page, fmt: Format) -> tuple[str, str]:
    """The model-visible text of a page, and its title."""
    from zuno.integrations.html_text import (
        html_to_text,  # imported on use: listing tools needs none
    )

    text, encoding = decode(page.body, page.charset, _is_html_mime(page), page.cut)
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


def _describe_binary(page: Page, asked: str) -> ToolResult:
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

    Args:
        limits: The tool output limits of the call.

    Returns:
        Slightly smaller limits to bound the text with.
    """
    reserve = min(1024, limits.max_bytes // 4)
    return OutputLimits(limits.max_bytes - reserve, max(1, limits.max_lines - 4))
