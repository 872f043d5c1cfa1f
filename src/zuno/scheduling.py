"""Grouping admitted calls into what may run together.

Walking the admitted calls in the model's order:

- consecutive non-exclusive calls (ParallelSafe, IsolatedBackground) form one
  group that runs at once, ParallelSafe ones under ``concurrency.tool_calls``;
  IsolatedBackground ones only start their job here and are not counted
  against the bound, since their work runs outside the foreground path;
- an Exclusive call is a group of its own: every earlier group has settled
  before it starts, and no later call starts until it has settled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from zuno.declarations import Concurrency, Declaration

__all__ = ["Group", "plan_groups"]


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
