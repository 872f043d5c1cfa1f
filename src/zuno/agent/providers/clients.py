"""SDK clients shared by the providers made while a pool is open.

A fleet worker runs one session after another, and each session makes its own
provider. An SDK client built for each of them costs its construction and a
new connection (with its TLS handshake) to the same address, every session. A
:class:`ClientPool` keeps one client per API kind, address, key and timeout
while it is open; :func:`~zuno.agent.providers.make_provider` takes its client
from the pool that is current in the calling task (a context variable, so the
tasks a session starts share it too) and the provider then leaves the client
open when it is closed itself. The pool closes its clients when it ends::

    async with ClientPool():
        provider = make_provider("openai:gpt-4o")   # the pool's client
        ...
        await provider.aclose()                     # the client stays open

Outside a pool every provider has a client of its own, as before. A pool is
entered in the event loop its clients are used in: an HTTP connection belongs
to one event loop, so clients never outlive the pool.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import anyio

__all__ = ["ClientKey", "ClientPool", "current_pool"]


class _Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


@dataclass(frozen=True, slots=True)
class ClientKey:
    """What makes two providers able to share one SDK client.

    Attributes:
        kind: ``openai`` or ``anthropic``.
        base_url: The API address.
        key: The API key (or bearer token) the client sends.
        bearer: Whether ``key`` is a bearer token rather than an API key.
        timeout: Seconds the client waits for a reply.
    """

    kind: str
    base_url: str
    key: str
    bearer: bool
    timeout: float


_CURRENT: ContextVar[ClientPool | None] = ContextVar("zuno_client_pool", default=None)


def current_pool() -> ClientPool | None:
    """The pool open in the calling task, or None."""
    return _CURRENT.get()


class ClientPool:
    """One SDK client per :class:`ClientKey`, closed when the pool ends."""

    def __init__(self) -> None:
        self._clients: dict[ClientKey, Any] = {}
        self._token: Token[ClientPool | None] | None = None
        self.made = 0
        """Clients made so far (one per distinct key)."""

    def client(self, key: ClientKey, make: Callable[[], C]) -> C:
        """The pool's client for ``key``, made by ``make`` the first time."""
        found = self._clients.get(key)
        if found is None:
            found = self._clients[key] = make()
            self.made += 1
        return found

    async def aclose(self) -> None:
        """Close every client (their connections); the pool is empty after."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    async def __aenter__(self) -> Self:
        self._token = _CURRENT.set(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None
        with anyio.CancelScope(shield=True):  # a cancelled worker still closes its sockets
            await self.aclose()
