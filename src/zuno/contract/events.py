"""Events: what the dispatcher says happened, in the order it happened.

Every event is persisted (the store is the source of truth for transcripts)
and handed to the bus's subscribers, such as the CLI's live view. Kinds:

- ``dispatch.started`` / ``dispatch.finished``: one model step.
- ``dispatch.blocked``: a call refused before running (``block_kind`` in data);
  always emitted before that call's ``call.result``.
- ``approval.requested`` / ``approval.decided``.
- ``hook.denied``: a before or after hook said no.
- ``call.started`` / ``call.finished``: one execution attempt of a call.
- ``call.retry``: a Safe call will be attempted again.
- ``call.result``: the model-visible result, appended in the model's order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Event", "EventBus", "EventLog"]


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened in a session."""

    kind: str
    session_id: str
    call_id: str | None = None
    data: dict[str, Any] = field(default_factory=lambda: {})
    at: float = field(default_factory=time.time)


Subscriber = Callable[[Event], None]


class EventLog(Protocol):
    """Where events are persisted: the store (:class:`zuno.durability.store.Store`).

    A protocol, so that events need not import the stores that keep them.
    """

    def append_event(self, event: Event) -> int:
        """Persist one event; its sequence number."""
        ...


class EventBus:
    """Persists events and tells subscribers, synchronously and in order."""

    def __init__(self, store: EventLog) -> None:
        self._store = store
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Add a subscriber; returns a function that removes it."""
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def emit(self, event: Event) -> None:
        """Persist the event, then tell every subscriber."""
        self._store.append_event(event)
        self.deliver(event)

    def deliver(self, event: Event) -> None:
        """Tell subscribers about an event already persisted by the store."""
        for subscriber in list(self._subscribers):
            subscriber(event)
