"""Grouping admitted calls into what may run together.

Walking the admitted calls in the model's order:

- consecutive non-exclusive calls (ParallelSafe, IsolatedBackground) form one
  group that runs at once, ParallelSafe ones under ``concurrency.tool_calls``;
  IsolatedBackground ones only start their job here and are not counted
  against the bound, since their work runs outside the foreground path;
- an Exclusive call is a group of its own: every earlier group has settled
  before it starts, and no later call starts until it has settled.

The same two-sided barrier holds between the steps of one session that run at
once (``zuno mcp serve`` answers a client's concurrent requests, each its own
step): every group holds the session's :class:`SessionBarrier`, shared for a
group that may overlap, alone for an Exclusive call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import anyio

from zuno.core.declarations import Concurrency, Declaration

__all__ = ["Group", "SessionBarrier", "plan_groups"]


class _Scheduled(Protocol):
    @property
    def declaration(self) -> Declaration: ...


T = TypeVar("T", bound=_Scheduled)


@dataclass(frozen=True, slots=True)
class Group(Generic[T]):
    """Calls that may run together; ``exclusive`` groups hold exactly one."""

    calls: tuple[T, ...]
    exclusive: bool


def plan_groups(calls: Sequence[T]) -> list[Group[T]]:
    """Split calls, kept in model order, into barrier-separated groups."""
    groups: list[Group[T]] = []
    pending: list[T] = []
    for call in calls:
        if call.declaration.concurrency is Concurrency.EXCLUSIVE:
            if pending:
                groups.append(Group(tuple(pending), exclusive=False))
                pending = []
            groups.append(Group((call,), exclusive=True))
        else:
            pending.append(call)
    if pending:
        groups.append(Group(tuple(pending), exclusive=False))
    return groups


class SessionBarrier:
    """A fair reader-writer lock over the groups of one session's concurrent steps.

    Shared holders (groups that may overlap) run together; an exclusive holder
    (an Exclusive call) waits for every earlier holder to leave, and every
    later one waits for it. Waiters are served in arrival order, so an
    Exclusive call is never starved by a stream of overlapping ones.
    """

    def __init__(self) -> None:
        self._shared = 0
        self._exclusive = False
        self._waiting: deque[tuple[bool, anyio.Event]] = deque()
        self.overlapped = False
        """Whether two steps ever held or waited at once (one step's groups never do):
        from then on a call rechecks the inspection rule when its turn comes."""

    def _fits(self, exclusive: bool) -> bool:
        if exclusive:
            return not self._exclusive and self._shared == 0
        return not self._exclusive

    def _enter(self, exclusive: bool) -> None:
        if exclusive:
            self._exclusive = True
        else:
            self._shared += 1

    def _leave(self, exclusive: bool) -> None:
        if exclusive:
            self._exclusive = False
        else:
            self._shared -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiting and self._fits(self._waiting[0][0]):
            exclusive, event = self._waiting.popleft()
            self._enter(exclusive)
            event.set()

    @asynccontextmanager
    async def hold(self, exclusive: bool) -> AsyncGenerator[None]:
        """Hold the barrier for one group: alone when ``exclusive``, else shared."""
        if self._exclusive or self._shared or self._waiting:
            self.overlapped = True
        if not self._waiting and self._fits(exclusive):
            self._enter(exclusive)
        else:
            entry = (exclusive, anyio.Event())
            self._waiting.append(entry)
            try:
                await entry[1].wait()
            except BaseException:
                # Cancelled while waiting: give back a grant that raced the
                # cancellation, or leave the queue and let the next one in.
                if entry[1].is_set():
                    self._leave(exclusive)
                else:
                    self._waiting.remove(entry)
                    self._wake()
                raise
        try:
            yield
        finally:
            self._leave(exclusive)
