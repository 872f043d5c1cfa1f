"""What the dispatcher needs from whoever hosts it.

The dispatcher and its pre-flight do not know the runtime
(:mod:`zuno.session.runtime`): they are handed a host that has the workspace,
the configuration, the store, the registry, the hooks and the approver, and
can switch a session's permission mode. The runtime is that host; a test may
give a smaller one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from zuno.config.loading import Config
    from zuno.config.permission import PermissionMode
    from zuno.contract.events import EventBus
    from zuno.contract.output import ArtifactStore, OutputLimits
    from zuno.contract.tool import OutputTap
    from zuno.dispatch.registry import Registry
    from zuno.dispatch.session_state import SessionState
    from zuno.durability.store import Store
    from zuno.policy.approvals import Approver
    from zuno.policy.control_paths import ControlPaths
    from zuno.policy.hooks import Hooks

__all__ = ["DispatchHost"]


class DispatchHost(Protocol):
    """The runtime as the dispatcher sees it.

    It is also what a tool's context offers as ``services``: the tools that
    need more (the job lane, the questioner) ask for it by name.
    """

    workspace: Path
    config: Config
    store: Store
    artifacts: ArtifactStore
    output_limits: OutputLimits
    control_paths: ControlPaths
    """Zuno's own folders, out of reach of the calls (see :mod:`zuno.policy.control_paths`)."""
    registry: Registry
    hooks: Hooks
    events: EventBus
    approver: Approver
    identity: str
    """The worker that runs the calls, written on every call row."""
    output_tap: OutputTap | None
    """Sees the output of foreground commands as it is read (None: no one)."""

    def set_mode(
        self, session: SessionState, mode: PermissionMode, *, remember: bool = True
    ) -> None:
        """Switch the session's permission mode from its next call on."""
        ...
