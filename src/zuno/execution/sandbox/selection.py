"""Choosing the sandbox from the configuration, and the policy of a command.

Selection never falls back silently: ``auto`` means bubblewrap, else Landlock,
and is a :class:`~zuno.execution.sandbox.policy.SandboxError` when neither can enforce
the configured policy. ``none`` is used only when named (or in ``full-access``
mode, which is unsandboxed by definition).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from zuno.config.sandbox import SandboxSettings
from zuno.execution.sandbox.bubblewrap import BubblewrapSandbox
from zuno.execution.sandbox.environment import withheld_names
from zuno.execution.sandbox.landlock import LandlockSandbox
from zuno.execution.sandbox.none import NoSandbox
from zuno.execution.sandbox.policy import Sandbox, SandboxError, SandboxPolicy
from zuno.execution.sandbox.probing import (
    BackendProbe,
    SandboxReport,
    probe_bubblewrap,
    probe_landlock,
    probe_landlock_proxy,
)

__all__ = ["policy_for", "sandbox_report", "select_sandbox"]


def _bubblewrap(probe: BackendProbe) -> Sandbox | str:
    if probe.available and probe.executable is not None:
        return BubblewrapSandbox(probe.executable)
    return f"bubblewrap: {probe.detail}"


def _landlock(probe: BackendProbe, network: bool | str) -> Sandbox | str:
    if not probe.available:
        return f"landlock: {probe.detail}"
    if network is not True and not probe.restricts_network:
        shown = "false" if network is False else repr(network)
        return f"landlock: {probe.detail}, and sandbox.network is {shown}"
    if network == "proxy" and (why := probe_landlock_proxy()) is not None:
        # Fails closed: no proxied command starts without its closed namespace.
        return f'landlock: sandbox.network "proxy" cannot start here: {why}'
    return LandlockSandbox()


def select_sandbox(settings: SandboxSettings) -> Sandbox:
    """The sandbox commands run under with these settings (probes are cached).

    Raises:
        SandboxError: The configured sandbox cannot start here. The message says
            why and what to configure instead.
    """
    if settings.mode == "full-access" or settings.kind == "none":
        if settings.proxied:
            raise SandboxError(
                'sandbox.network is "proxy", which needs a sandbox to close the network, '
                f"but sandbox.kind is {settings.kind!r} and sandbox.mode {settings.mode!r}; "
                "choose bubblewrap or Landlock, or set sandbox.network to true or false"
            )
        return NoSandbox()
    if settings.kind == "bubblewrap":
        found = _bubblewrap(probe_bubblewrap())
    elif settings.kind == "landlock":
        found = _landlock(probe_landlock(), settings.network)
    else:
        found = _bubblewrap(probe_bubblewrap())
        if isinstance(found, str):
            second = _landlock(probe_landlock(), settings.network)
            found = second if not isinstance(second, str) else f"{found}; {second}"
    if isinstance(found, str):
        raise SandboxError(
            f"sandbox.kind is {settings.kind!r} but no such sandbox can start ({found}). "
            "Install bubblewrap, choose another sandbox.kind, or set sandbox.kind to "
            '"none" to run commands without a sandbox.'
        )
    return found


def sandbox_report(settings: SandboxSettings | None = None) -> SandboxReport:
    """The probe of every sandbox and the outcome of selection, for ``zuno doctor``."""
    settings = settings or SandboxSettings()
    try:
        selected: str | None = select_sandbox(settings).name
        error = None
    except SandboxError as exc:
        selected, error = None, str(exc)
    return SandboxReport(
        kind=settings.kind,
        mode=settings.mode,
        network=settings.network,
        selected=selected,
        error=error,
        backends=[probe_bubblewrap(), probe_landlock()],
        withheld_env=withheld_names(settings.env_remove, keep=settings.env_keep),
    )


def policy_for(
    settings: SandboxSettings, workspace: Path, *, protected: Sequence[Path] = ()
) -> SandboxPolicy:
    """The policy of a command in workspace under settings.

    Relative ``writable_roots`` are taken from the workspace; ``~`` is expanded.
    ``protected`` lists Zuno's own folders, which stay read-only wherever they lie.
    """
    roots: list[Path] = []
    for raw in settings.writable_roots:
        p = Path(os.path.expanduser(raw))
        roots.append(p if p.is_absolute() else workspace / p)
    return SandboxPolicy(
        mode=settings.mode,
        workspace=workspace,
        network=settings.network is True,
        writable_roots=tuple(roots),
        protected=tuple(protected),
    )
