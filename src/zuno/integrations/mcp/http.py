"""The HTTP client under a streamable-HTTP MCP server: failures become answers, not crashes.

The SDK sends each request in a background task of the client's task group; an
``httpx`` transport error raised there (connection refused, the server gone
mid-response) takes the whole group down, and with it the task that connected
the server: the whole batch, built-in tools included. This transport turns
those errors into a JSON-RPC error answer for the one request, which the SDK
hands to the caller like any refusal.

Two answers, told apart by code, and marked with a per-process token so no
real server can forge them:

- :data:`NOT_SENT`: the connection could not be opened (refused, connect or
  pool timeout); not a byte of the request left, so nothing can have run.
- :data:`LOST`: the exchange failed after the connection was open; the
  request may have been received and carried out.
"""

from __future__ import annotations

import secrets
from typing import Any

import httpx2

__all__ = ["LOST", "NOT_SENT", "failure_kind", "resilient_http_client"]

NOT_SENT = -32091
"""The code of a request that never left (the connection could not be opened)."""
LOST = -32092
"""The code of a request whose exchange failed after the connection was open."""

_TOKEN = secrets.token_hex(16)
"""Marks the answers made here; a server cannot guess it."""


def failure_kind(code: int, data: Any) -> int | None:
    """:data:`NOT_SENT` or :data:`LOST` for an answer this module made, else None."""
    if code in (NOT_SENT, LOST) and isinstance(data, dict) and data.get("zuno") == _TOKEN:  # pyright: ignore[reportUnknownMemberType]
        return code
    return None


def _answer(request: httpx2.Request, code: int, message: str) -> httpx2.Response:
    body = {
        "jsonrpc": "2.0",
        "id": None,  # the SDK puts the id of the request it answers
        "error": {"code": code, "message": message, "data": {"zuno": _TOKEN}},
    }
    return httpx2.Response(503, json=body, request=request)


class _ResilientTransport(httpx2.AsyncBaseTransport):
    """Wraps the default transport; transport errors become JSON-RPC answers."""

    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self._inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout) as exc:
            return _answer(request, NOT_SENT, f"could not connect ({_detail(exc)})")
        except httpx2.TransportError as exc:
            return _answer(request, LOST, f"the exchange failed ({_detail(exc)})")

    async def aclose(self) -> None:
        await self._inner.aclose()


def _detail(exc: Exception) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def resilient_http_client() -> httpx2.AsyncClient:
    """An HTTP client for the SDK's streamable-HTTP transport (the caller closes it).

    The timeouts are the SDK's defaults: 30 s to connect, write or wait for a
    pooled connection, 300 s between bytes of a response stream.
    """
    return httpx2.AsyncClient(
        transport=_ResilientTransport(), timeout=httpx2.Timeout(30.0, read=300.0)
    )
