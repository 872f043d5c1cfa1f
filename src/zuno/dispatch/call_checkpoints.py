"""The checkpoint taken before a call that may change workspace files.

The dispatcher asks for one before every side-effecting call of a tool that
changes the workspace (``zuno diff``, ``zuno undo`` restore from them). The
shadow git store (:mod:`zuno.workspace.checkpoints.store`) is opened on first
need; a session's first look at the tree may run in the background, and the
calls made meanwhile get their checkpoints when it ends.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import anyio

from zuno.contract.events import Event
from zuno.core.declarations import Effect

if TYPE_CHECKING:
    from zuno.dispatch.admission import Admitted
    from zuno.dispatch.host import DispatchHost
    from zuno.dispatch.session_state import SessionState
    from zuno.workspace.checkpoints.store import Checkpoints

__all__ = ["CallCheckpoints"]

_log = logging.getLogger("zuno.dispatch.dispatcher")


class CallCheckpoints:
    """The checkpoints of one dispatcher's calls, in one workspace's shadow store."""

    def __init__(self, host: DispatchHost) -> None:
        self._host = host

    async def before(self, session: SessionState, call: Admitted, attempt: int) -> str | None:
        """Snapshot the workspace before a side-effecting call; None when none was taken.

        A failed snapshot does not stop the call (the user asked for it, and the
        runtime must not become unusable without git): its row keeps no snapshot,
        so it cannot be undone, and a ``checkpoint.failed`` event says why.

        While the session's first look still runs, a file tool's call does not
        wait for it: the pre-images of its paths are recorded now and its row is
        given the checkpoint when the look ends (:mod:`zuno.workspace.checkpoints.early`).
        """
        if call.declaration.effect is not Effect.SIDE_EFFECTING or not call.tool.changes_workspace:
            return None
        from zuno.workspace.checkpoints.store import CheckpointError, checkpoints_enabled

        if not checkpoints_enabled():
            return None
        checkpoints = self.store
        self.settle()
        which = {"call_id": call.call_id, "tool": call.tool.name, "session_id": session.session_id}
        try:
            # A few watched paths: recorded here in about a millisecond; else in a thread.
            snapshot = checkpoints.take_quick(**which)
            if snapshot is None and call.tool.writes_files and checkpoints.looking():
                early = functools.partial(
                    checkpoints.take_early,
                    attempt=attempt,
                    paths=call.tool.touched_paths(call.args),
                    **which,
                )
                if await anyio.to_thread.run_sync(early):
                    # Its row is given the checkpoint when the look ends; till then
                    # this event says one is coming (undo notes, `zuno undo`).
                    self._host.events.emit(
                        Event(
                            "checkpoint.pending",
                            session.session_id,
                            call.call_id,
                            {"tool": call.tool.name},
                        )
                    )
                    return None
            if snapshot is None:
                snapshot = await anyio.to_thread.run_sync(
                    functools.partial(checkpoints.take, **which)
                )
        except CheckpointError as exc:
            self._no_checkpoint(session.session_id, call.call_id, call.tool.name, str(exc))
            return None
        self.settle()  # the look this call waited for may have ended
        if snapshot.unreadable:
            self._incomplete(session.session_id, call.call_id, call.tool.name, snapshot.unreadable)
        return snapshot.commit

    def _no_checkpoint(self, session_id: str, call_id: str, tool: str, reason: str) -> None:
        _log.warning("zuno: no checkpoint before %s (%s): %s", call_id, tool, reason)
        self._host.events.emit(
            Event("checkpoint.failed", session_id, call_id, {"tool": tool, "reason": reason})
        )

    def _incomplete(
        self, session_id: str, call_id: str, tool: str, unreadable: Sequence[str]
    ) -> None:
        self._host.events.emit(
            Event(
                "checkpoint.incomplete",
                session_id,
                call_id,
                {"tool": tool, "unreadable": list(unreadable[:50])},
            )
        )

    def settle(self) -> None:
        """Give the calls recorded early (see :meth:`before`) their checkpoints, if ready."""
        from zuno.durability.store.errors import StoreError

        checkpoints: Checkpoints | None = self.__dict__.get("store")
        if checkpoints is None:
            return
        for early in checkpoints.early_snapshots():
            if early.commit is None:
                self._no_checkpoint(early.session_id, early.call_id, early.tool, early.reason)
                continue
            try:
                self._host.store.set_call_snapshot(early.call_id, early.attempt, early.commit)
            except StoreError as exc:  # not this call's failure: that one stays without undo
                self._no_checkpoint(early.session_id, early.call_id, early.tool, str(exc))
                continue
            if early.unreadable:
                self._incomplete(early.session_id, early.call_id, early.tool, early.unreadable)

    @functools.cached_property
    def store(self) -> Checkpoints:
        """The shadow git store of this runtime's workspace (see
        :mod:`zuno.workspace.checkpoints.store`).
        """
        from zuno.workspace.checkpoints.store import checkpoints_of_store, denied_patterns

        # Paths a deny rule keeps from reading are never copied into the store.
        denied = denied_patterns(self._host.config.permission.rules)
        checkpoints = checkpoints_of_store(self._host.store, self._host.workspace, denied=denied)
        calls = self._host.store
        # A call recorded early names its checkpoint as soon as the look wrote it (the
        # store is shared between threads); its events follow at settle.
        checkpoints.on_early = lambda early: (
            calls.set_call_snapshot(early.call_id, early.attempt, early.commit)
            if early.commit is not None
            else None
        )
        return checkpoints

    def prepare(self, tools: Sequence[object]) -> None:
        """Take the workspace's first checkpoint look in the background (a session starts).

        Only when checkpoints are on and one of ``tools`` may change workspace files:
        the first side-effecting call then pays for what changed since, not for the tree.
        """
        from zuno.workspace.checkpoints.store import checkpoints_enabled

        if checkpoints_enabled() and any(getattr(t, "changes_workspace", False) for t in tools):
            self.store.prepare()

    def close(self) -> None:
        """Stop watching the workspace (the checkpoints' inotify instance), if one started."""
        checkpoints: Checkpoints | None = self.__dict__.get("store")
        if checkpoints is not None:
            checkpoints.close()  # waits for the background look
            self.settle()
            del self.__dict__["store"]
