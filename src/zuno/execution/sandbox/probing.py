"""Probing which sandboxes work on this machine, once per process.

A probe does not trust appearances: it starts a real command under each
sandbox with the flags real launches use. The results are cached, so the
runtime pays for probing once at startup; ``zuno doctor`` shows them through
:func:`sandbox_report`.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

from zuno.execution.sandbox.bubblewrap import BASE_FLAGS
from zuno.execution.sandbox.landlock import HELPER, abi_version

__all__ = [
    "BackendProbe",
    "SandboxReport",
    "probe_bubblewrap",
    "probe_landlock",
    "probe_landlock_proxy",
]

_PROBE_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class BackendProbe:
    """Whether one sandbox can run commands here.

    Attributes:
        name: ``bubblewrap`` or ``landlock``.
        available: Whether a real command ran under it.
        detail: What was found, or why it cannot start (for people).
        executable: The bwrap binary, for bubblewrap.
        version: The bwrap version, for bubblewrap.
        abi: The kernel's Landlock ABI, for Landlock (0 when absent).
        restricts_network: Whether it can keep commands off the network.
    """

    name: str
    available: bool
    detail: str
    executable: str | None = None
    version: str | None = None
    abi: int | None = None
    restricts_network: bool = False


@dataclass(frozen=True, slots=True)
class SandboxReport:
    """What ``zuno doctor`` shows about sandboxing.

    Attributes:
        kind: The configured ``sandbox.kind``.
        mode: The configured ``sandbox.mode``.
        network: ``sandbox.network``: true, false or ``"proxy"``.
        selected: The sandbox commands will run under, or None when none can.
        error: Why the configured sandbox cannot start (a startup error), or None.
        backends: The probe of each sandbox.
        withheld_env: The names (never the values) of this process's environment
            variables that commands do not receive.
    """

    kind: str
    mode: str
    network: bool | str
    selected: str | None
    error: str | None
    backends: list[BackendProbe] = field(default_factory=lambda: [])
    withheld_env: list[str] = field(default_factory=lambda: [])

    @property
    def ok(self) -> bool:
        """Whether commands can run as configured."""
        return self.error is None

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON-ready data."""
        data = asdict(self)
        data["ok"] = self.ok
        return data


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=_PROBE_TIMEOUT,
        check=False,
    )


@functools.cache
def probe_bubblewrap() -> BackendProbe:
    """Find bwrap and run ``true`` under the namespaces real launches use."""
    executable = shutil.which("bwrap")
    if executable is None:
        return BackendProbe(
            "bubblewrap", False, "bwrap is not installed (apt-get install bubblewrap)"
        )
    try:
        version = _run([executable, "--version"]).stdout.strip() or None
        with tempfile.TemporaryDirectory(prefix="zuno-probe-") as tmp:
            flags = [*BASE_FLAGS, "--unshare-net", "--bind", tmp, "/tmp", "--chdir", "/"]
            done = _run([executable, *flags, "--", "true"])
    except (OSError, subprocess.SubprocessError) as exc:
        return BackendProbe("bubblewrap", False, f"bwrap could not run: {exc}", executable)
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        return BackendProbe(
            "bubblewrap",
            False,
            f"bwrap cannot create its namespaces here: {reason[0]}",
            executable,
            version,
        )
    return BackendProbe(
        "bubblewrap", True, f"{version or 'bwrap'} at {executable}", executable, version, None, True
    )


@functools.cache
def probe_landlock() -> BackendProbe:
    """Read the Landlock ABI and run a real ``true`` through the exec helper.

    The helper also creates the namespaces every launch uses (PID, mount, IPC,
    network; a user namespace when not root), so a machine that forbids them
    reports Landlock as unavailable, with the reason, rather than running
    commands that could outlive their call.
    """
    abi = abi_version()
    if abi < 1:
        return BackendProbe("landlock", False, "the kernel has no Landlock support", abi=0)
    rules = json.dumps({"write_dirs": [], "write_files": [], "network": abi < 4})
    try:
        done = _run([sys.executable, "-I", "-S", str(HELPER), rules, "--", "true"])
    except (OSError, subprocess.SubprocessError) as exc:
        return BackendProbe("landlock", False, f"the Landlock helper could not run: {exc}", abi=abi)
    if done.returncode != 0:
        return BackendProbe(
            "landlock",
            False,
            f"Landlock ABI {abi}: the exec helper failed: {done.stderr.strip()}",
            abi=abi,
        )
    net = abi >= 4
    detail = f"Landlock ABI {abi}" + ("" if net else " (cannot restrict TCP; ABI 4 is needed)")
    return BackendProbe("landlock", True, detail, abi=abi, restricts_network=net)


@functools.cache
def probe_landlock_proxy() -> str | None:
    """Why ``proxy`` network mode cannot run under Landlock here, or None when it can.

    Runs ``true`` through the exec helper as a proxied command starts: a fresh
    network namespace with its loopback brought up, and TCP allowed on the
    proxy's port only (Landlock ABI 4). Asked only when the mode is chosen.
    """
    from zuno.execution.sandbox.egress import PROXY_PORT

    rules = json.dumps(
        {"write_dirs": [], "write_files": [], "network": False, "egress_port": PROXY_PORT}
    )
    try:
        done = _run([sys.executable, "-I", "-S", str(HELPER), rules, "--", "true"])
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the Landlock helper could not run: {exc}"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return lines[-1] if lines else f"the exec helper exited with {done.returncode}"
    return None
