"""Sandboxes for commands: bubblewrap, Landlock, and none when asked for by name.

Settings (:class:`SandboxSettings`) choose the sandbox and mode;
:func:`select_sandbox` probes once and returns the :class:`Sandbox`, or raises
:class:`SandboxError` at startup; :func:`policy_for` and
:func:`prepared_launch` turn a command into the argv that actually runs;
:func:`sandbox_report` is what ``zuno doctor`` shows. Under both real
sandboxes the workspace's control files (:data:`CONTROL_NAMES`) stay read-only,
nothing a command starts outlives it, and with the network off no socket
outside the sandbox is reachable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zuno.core.lazy_names import lazy_names

# Public names load on first use (see zuno.core.lazy_names): importing one submodule
# (the settings, for the configuration) must not import the whole package.
if TYPE_CHECKING:
    from zuno.config.sandbox import DEFAULT_ENV_REMOVE, SandboxKind, SandboxMode, SandboxSettings
    from zuno.execution.sandbox.bubblewrap import BubblewrapSandbox
    from zuno.execution.sandbox.control_files import CONTROL_NAMES
    from zuno.execution.sandbox.environment import command_environment
    from zuno.execution.sandbox.landlock import LandlockSandbox
    from zuno.execution.sandbox.none import NoSandbox
    from zuno.execution.sandbox.policy import (
        Launch,
        Sandbox,
        SandboxError,
        SandboxPolicy,
        prepared_launch,
    )
    from zuno.execution.sandbox.probing import (
        BackendProbe,
        SandboxReport,
        probe_bubblewrap,
        probe_landlock,
    )
    from zuno.execution.sandbox.selection import policy_for, sandbox_report, select_sandbox

__all__ = [
    "CONTROL_NAMES",
    "DEFAULT_ENV_REMOVE",
    "BackendProbe",
    "BubblewrapSandbox",
    "LandlockSandbox",
    "Launch",
    "NoSandbox",
    "Sandbox",
    "SandboxError",
    "SandboxKind",
    "SandboxMode",
    "SandboxPolicy",
    "SandboxReport",
    "SandboxSettings",
    "command_environment",
    "policy_for",
    "prepared_launch",
    "probe_bubblewrap",
    "probe_landlock",
    "sandbox_report",
    "select_sandbox",
]

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "CONTROL_NAMES": "zuno.execution.sandbox.control_files",
        "DEFAULT_ENV_REMOVE": "zuno.config.sandbox",
        "BackendProbe": "zuno.execution.sandbox.probing",
        "BubblewrapSandbox": "zuno.execution.sandbox.bubblewrap",
        "LandlockSandbox": "zuno.execution.sandbox.landlock",
        "Launch": "zuno.execution.sandbox.policy",
        "NoSandbox": "zuno.execution.sandbox.none",
        "Sandbox": "zuno.execution.sandbox.policy",
        "SandboxError": "zuno.execution.sandbox.policy",
        "SandboxKind": "zuno.config.sandbox",
        "SandboxMode": "zuno.config.sandbox",
        "SandboxPolicy": "zuno.execution.sandbox.policy",
        "SandboxReport": "zuno.execution.sandbox.probing",
        "SandboxSettings": "zuno.config.sandbox",
        "command_environment": "zuno.execution.sandbox.environment",
        "policy_for": "zuno.execution.sandbox.selection",
        "prepared_launch": "zuno.execution.sandbox.policy",
        "probe_bubblewrap": "zuno.execution.sandbox.probing",
        "probe_landlock": "zuno.execution.sandbox.probing",
        "sandbox_report": "zuno.execution.sandbox.selection",
        "select_sandbox": "zuno.execution.sandbox.selection",
    },
)
