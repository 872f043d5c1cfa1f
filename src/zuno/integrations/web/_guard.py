"""The network guard: which URLs, domains and addresses a fetch may reach.

Every hop (the URL and each redirect) is checked against
``web.allowed_domains`` and ``web.blocked_domains``, its host is resolved here,
and unless ``web.allow_private_networks`` is set every address must be public
(no loopback, private, link-local, shared or reserved ranges). The connection
then goes to an address that was checked, with the original name as ``Host``
and TLS server name, so a second DNS answer cannot point the request somewhere
else (DNS rebinding).

A refusal before anything was sent is :class:`~zuno.contract.tool.ArgumentsRejected`;
a refusal of a redirect's target is a :class:`~zuno.contract.tool.ToolError`.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING

import anyio

from zuno.config.web import WebSettings, domain_matches
from zuno.contract.tool import ArgumentsRejected, ToolError, TransientError
from zuno.integrations.web._http import http_failure, tls_failure

if TYPE_CHECKING:
    import httpx

__all__ = ["check_domain", "open_checked", "parse_url"]

_ADDRESSES_TRIED = 3


def parse_url(raw: str) -> httpx.URL:
    """The http(s) URL ``raw`` names.

    Args:
        raw: The URL as the model wrote it.

    Returns:
        The parsed URL.

    Raises:
        ArgumentsRejected: It is not a URL, its scheme is not http(s), or it
            has no host.
    """
    import httpx  # imported on use: slow to import

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


def check_domain(url: httpx.URL, web: WebSettings, *, before_sending: bool) -> None:
    """Refuse a host the domain lists exclude (a redirect's refusal is an error).

    Args:
        url: The URL about to be requested.
        web: The ``web`` settings holding the domain lists.
        before_sending: Whether this is the first hop (nothing sent yet).

    Raises:
        ArgumentsRejected: The first hop's host is excluded.
        ToolError: A redirect's host is excluded.
    """
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
    """Why an address is not public.

    Args:
        address: An IPv4 or IPv6 address, possibly with a ``%zone``.

    Returns:
        The kind of range it is in ("loopback", "private-network", ...), or
        None when it is public.
    """
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


async def open_checked(
    client: httpx.AsyncClient, url: httpx.URL, web: WebSettings, first_hop: bool
) -> httpx.Response:
    """Send a GET for ``url`` to a checked address of its host; the response streams.

    Args:
        client: The client to send with (it must not follow redirects).
        url: The URL of this hop.
        web: The ``web`` settings (``allow_private_networks``).
        first_hop: Whether this is the URL asked for rather than a redirect.

    Returns:
        The response, its body not yet read; the caller closes it.

    Raises:
        ArgumentsRejected: The first hop's host resolves to a non-public address.
        ToolError: A redirect's host does, the host cannot be resolved, or the
            request failed for good.
        TransientError: The request failed in a way that may pass.
    """
    import httpx  # imported on use: slow to import

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
            if tls_failure(exc):
                break  # the same certificate would come from every address
        except httpx.HTTPError as exc:
            failure = exc
            break
    assert failure is not None
    raise http_failure(failure, str(url)) from None
