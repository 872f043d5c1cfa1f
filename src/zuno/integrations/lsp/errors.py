"""The errors of the language-server client.

Errors::

    LspError
      ServerUnavailable   the server could not be started or did not initialize
      ServerExited        the server died or broke the protocol; the client is unusable
      RequestTimeout      no answer within the deadline (the request was cancelled)
      ResponseError       the server answered with a JSON-RPC error
"""

from __future__ import annotations

__all__ = [
    "LspError",
    "RequestTimeout",
    "ResponseError",
    "ServerExited",
    "ServerUnavailable",
]


class LspError(Exception):
    """Base of the language-server client's errors."""


class ServerUnavailable(LspError):
    """The server could not be started, or did not complete ``initialize``."""


class ServerExited(LspError):
    """The server died or broke the protocol; this client cannot be used again."""


class RequestTimeout(LspError):
    """A request got no answer within its deadline; it was cancelled."""


class ResponseError(LspError):
    """The server answered a request with a JSON-RPC error.

    Attributes:
        method: The request's method.
        code: The JSON-RPC error code (0 when the server gave none).
        message: The server's description of the error.
    """

    def __init__(self, method: str, code: int, message: str) -> None:
        """An error answer to ``method``."""
        super().__init__(f"{method} failed: {message} (code {code})")
        self.method = method
        self.code = code
        self.message = message
