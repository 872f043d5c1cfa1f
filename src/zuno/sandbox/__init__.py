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
