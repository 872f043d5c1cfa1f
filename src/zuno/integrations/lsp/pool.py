"""The running language servers of this process: one per (command, workspace).

A server is started on first use and kept until the process ends, because
starting one (and letting it index the workspace) is the expensive part. The
``lsp`` tool cannot hook the runtime's exit, so servers die with Zuno instead:
each runs in its own process group, which a finalizer kills at interpreter exit
(or when its client is dropped). Programs and tests that want the servers gone
earlier call :meth:`ServerPool.aclose`.

Requests in flight are bounded per runtime by one
:class:`anyio.CapacityLimiter` (``concurrency.lsp_requests``), kept in a
weak dictionary keyed by the runtime so it lives exactly as long as it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path

import anyio

from zuno.config.lsp import LspServerSettings
from zuno.config.sandbox import SandboxSettings
from zuno.integrations.lsp.client import LspClient

__all__ = ["LSP_SERVERS", "ServerPool"]

_Key = tuple[tuple[str, ...], Path]


class ServerPool:
    """Language-server clients by (command, workspace), and request limiters by runtime."""

    def __init__(self) -> None:
        self._clients: dict[_Key, LspClient] = {}
        self._starting: dict[_Key, anyio.Lock] = {}
        self._limiters: weakref.WeakKeyDictionary[object, anyio.CapacityLimiter] = (
            weakref.WeakKeyDictionary()
        )
        self._unowned: dict[int, anyio.CapacityLimiter] = {}

    async def client(
        self,
        argv: Sequence[str],
        workspace: Path,
        server: LspServerSettings,
        *,
        startup_timeout: float,
        extensions: Iterable[str] = (),
        sandbox: SandboxSettings | None = None,
        protected: Sequence[Path] = (),
    ) -> LspClient:
        """The running client for ``argv`` in ``workspace``, started (or restarted) if need be.

        ``extensions`` are the file types the server serves (their changes are reported);
        ``sandbox`` and ``protected`` confine it (see :class:`LspClient`).

        Raises:
            ServerUnavailable: the server could not be started.
        """
        key: _Key = (tuple(argv), workspace)
        lock = self._starting.setdefault(key, anyio.Lock())
        async with lock:
            client = self._clients.get(key)
            if client is not None and client.alive:
                return client
            if client is not None:
                # It died or broke the protocol: a fresh one replaces it.
                client.kill()
                del self._clients[key]
            client = LspClient(argv, workspace, server, extensions, sandbox, protected)
            await client.start(timeout=startup_timeout)
            self._clients[key] = client
            return client

    def clients(self, workspace: Path | None = None) -> list[LspClient]:
        """The clients kept (for one workspace, or all)."""
        return [c for (_, ws), c in self._clients.items() if workspace is None or ws == workspace]

    def limiter(self, owner: object | None, total: int) -> anyio.CapacityLimiter:
        """The request limiter of ``owner`` (a runtime), sized ``total``.

        Calls without an owner (a tool run outside a runtime) share one limiter per size.
        """
        if owner is None:
            limiter = self._unowned.get(total)
            if limiter is None:
                limiter = self._unowned[total] = anyio.CapacityLimiter(total)
            return limiter
        limiter = self._limiters.get(owner)
        if limiter is None:
            limiter = anyio.CapacityLimiter(total)
            self._limiters[owner] = limiter
        elif limiter.total_tokens != total:
            limiter.total_tokens = total
        return limiter

    async def aclose(self, workspace: Path | None = None) -> None:
        """Shut down the servers (of one workspace, or all) and forget them."""
        for key, client in list(self._clients.items()):
            if workspace is None or key[1] == workspace:
                del self._clients[key]
                await client.aclose()


LSP_SERVERS = ServerPool()
"""The process's servers, shared by every runtime (each keeps its own limiter)."""
