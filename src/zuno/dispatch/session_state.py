"""A session as the dispatcher sees it: who acts, with which tools, in which mode.

The runtime (:mod:`zuno.session.runtime`) makes one when a session is opened
and the dispatcher, the agent loop and the tools read it. It is a plain
record: it holds no store and opens nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zuno.config.loading import AgentSettings, PermissionSettings
from zuno.dispatch.registry import Surface
from zuno.dispatch.scheduling import SessionBarrier

__all__ = ["SessionState"]


@dataclass(slots=True, weakref_slot=True, eq=False)
class SessionState:
    """A session as the dispatcher sees it: who is acting and with which tools."""

    session_id: str
    agent_name: str
    agent: AgentSettings | None
    surface: Surface
    permissions: PermissionSettings
    depth: int = 0
    narrowed_to: frozenset[str] | None = None
    """The tool names a delegation narrowed this session to, if any."""
    barrier: SessionBarrier = field(default_factory=SessionBarrier)
    """Keeps Exclusive calls apart across this session's steps running at once."""
    by_person: bool = False
    """Whether the calls are typed by a person (``zuno call``, ``zuno batch``), not a model:
    the file tools then never refuse a change for want of a prior read
    (see :mod:`zuno.durability.file_versions`)."""
