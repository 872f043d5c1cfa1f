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

from zuno.lazy_names import lazy_names

# Public names load on first use (see zuno.lazy_names): importing one submodule
# (the settings, for the configuration) must not import the whole package.
if TYPE_CHECKING:
    from zuno.sandbox.bubblewrap import BubblewrapSandbox
    from zuno.sandbox.control_files import CONTROL_NAMES
    from zuno.sandbox.environment import command_environment
    from zuno.sandbox.landlock import LandlockSandbox
    from zuno.sandbox.none import NoSandbox
    from zuno.sandbox.policy import Launch, Sandbox, SandboxError, SandboxPolicy, prepared_launch
    from zuno.sandbox.probing import BackendProbe, SandboxReport, probe_bubblewrap, probe_landlock
    from zuno.sandbox.selection import policy_for, sandbox_report, select_sandbox
    from zuno.sandbox.settings import DEFAULT_ENV_REMOVE, SandboxKind, SandboxMode, SandboxSettings

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
        "CONTROL_NAMES": "zuno.sandbox.control_files",
        "DEFAULT_ENV_REMOVE": "zuno.sandbox.settings",
        "BackendProbe": "zuno.sandbox.probing",
        "BubblewrapSandbox": "zuno.sandbox.bubblewrap",
        "LandlockSandbox": "zuno.sandbox.landlock",
        "Launch": "zuno.sandbox.policy",
        "NoSandbox": "zuno.sandbox.none",
        "Sandbox": "zuno.sandbox.policy",
        "SandboxError": "zuno.sandbox.policy",
        "SandboxKind": "zuno.sandbox.settings",
        "SandboxMode": "zuno.sandbox.settings",
        "SandboxPolicy": "zuno.sandbox.policy",
        "SandboxReport": "zuno.sandbox.probing",
        "SandboxSettings": "zuno.sandbox.settings",
        "command_environment": "zuno.sandbox.environment",
        "policy_for": "zuno.sandbox.selection",
        "prepared_launch": "zuno.sandbox.policy",
        "probe_bubblewrap": "zuno.sandbox.probing",
        "probe_landlock": "zuno.sandbox.probing",
        "sandbox_report": "zuno.sandbox.selection",
        "select_sandbox": "zuno.sandbox.selection",
    },
)
