"""HTTP as the web tools speak it: their User-Agent, and what a failure means.

A transport failure or an HTTP error status becomes the error the model sees:
a :class:`~zuno.contract.tool.TransientError` when it may pass (the dispatcher retries
it after a backoff), a :class:`~zuno.contract.tool.ToolError` when it will not::

    HTTP 4xx, TLS failure, undecodable body        ToolError
    HTTP 5xx, 408, 425, 429, timeout, lost link    TransientError
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zuno.contract.tool import ToolError, TransientError
from zuno.core.sentences import full_stop

if TYPE_CHECKING:
    import httpx

__all__ = ["USER_AGENT", "http_failure", "status_failure", "tls_failure"]

USER_AGENT = "Zuno (coding agent tool runtime; webfetch)"
"""The User-Agent of every request the web tools send."""

_TRANSIENT_STATUS = frozenset({408, 425, 429})


def tls_failure(exc: httpx.HTTPError) -> bool:
    """Whether a failed request failed in the TLS handshake.

    Args:
        exc: The failure.

    Returns:
        True when its message names TLS, SSL or an untrusted certificate.
    """
    text = str(exc)
    return "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text or "TLS" in text


def http_failure(exc: httpx.HTTPError, what: str) -> ToolError:
    """The error a transport failure of a request for ``what`` means to the model.

    Args:
        exc: The failure httpx raised.
        what: What was requested (a URL, or a backend's name), for the message.

    Returns:
        A :class:`~zuno.contract.tool.TransientError` for a timeout, a refused
        connection or a lost link; a :class:`~zuno.contract.tool.ToolError` otherwise.
    """
    import httpx  # imported on use: slow to import

    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return TransientError(f"{what}: timed out ({type(exc).__name__})")
    if isinstance(exc, httpx.ConnectError):
        if tls_failure(exc):
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
    """The error an HTTP error status means: 5xx and 408/425/429 may pass, 4xx will not.

    Args:
        status: The HTTP status code (400 or more).
        reason: Its reason phrase.
        what: Who answered (a URL, or a backend's name), for the message.
        excerpt: The start of the error body, on one line ("" for none).
        retry_after: The ``Retry-After`` header, when the server sent one.

    Returns:
        A :class:`~zuno.contract.tool.TransientError` when the status may pass, a
        :class:`~zuno.contract.tool.ToolError` otherwise.
    """
    message = f"HTTP {status} {reason} from {what}"
    if excerpt:
        message += f": {excerpt}"
    if status >= 500 or status in _TRANSIENT_STATUS:
        wait = f" (the server asks to wait {retry_after} s)" if retry_after else ""
        return TransientError(f"{full_stop(message)} This may pass; try again later{wait}.")
    if status == 404:
        message = f"{full_stop(message)} Check the URL"
    elif status in (401, 403):
        message = (
            f"{full_stop(message)} The site refuses access "
            "(it may need a login or block automated clients)"
        )
    return ToolError(message)
