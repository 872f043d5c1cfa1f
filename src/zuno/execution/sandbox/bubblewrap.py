"""The bubblewrap sandbox: a read-only view of the machine in fresh namespaces.

The command sees the whole file system read-only, a private ``/tmp`` (a fresh
host folder bound there), a minimal ``/dev``, its own ``/proc`` and PID
namespace, and the policy's writable folders bound read-write. With the network
off it gets its own network namespace, where only an unconnected loopback
exists. All capabilities are dropped, so nothing inside can remount.

``--die-with-parent`` and the PID namespace make the deadline hard: killing
the bwrap process kills the namespace's init, and the kernel then kills every
process left in the namespace, including ones that left the session.

The workspace's control files and Zuno's own folders (``policy.read_only``)
are bound read-only over the writable folders, after the folders leading to
them were pinned (``policy.pinned``, bound over themselves). The command also
gets the seccomp filter of :mod:`zuno.execution.sandbox._seccomp` (no ptrace, no keyring,
no TIOCSTI; with the network off, no UNIX socket of the host reachable through
a path); bwrap reads it from a descriptor, which a ``/bin/sh`` in front of
bwrap opens from a file and then replaces itself with bwrap.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from zuno.execution.sandbox._seccomp import command_filter_bytes
from zuno.execution.sandbox.egress import bridged, proxy_environment
from zuno.execution.sandbox.policy import Launch, SandboxPolicy, tops_under_tmp

__all__ = ["BASE_FLAGS", "BubblewrapSandbox"]

BASE_FLAGS: tuple[str, ...] = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    # A new session keeps the command from injecting input into a terminal.
    "--new-session",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
)
"""Flags of every launch, before the policy's binds."""

_TMP = "/tmp"


_FILTER_FD = "3"
_filter_lock = threading.Lock()
_filter_files: dict[bool, Path] = {}


def command_filter_file(network: bool) -> Path:
    """A file holding the seccomp filter, made once per process in a private folder.

    Made again when something (a cleaner of /tmp) removed it; the folder is
    removed when the process exits.
    """
    data = command_filter_bytes(network)
    with _filter_lock:
        path = _filter_files.get(network)
        if path is not None:
            try:
                if path.read_bytes() == data:
                    return path
            except OSError:
                pass
        folder = Path(tempfile.mkdtemp(prefix="zuno-seccomp-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        path = folder / "command-filter.bpf"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        _filter_files[network] = path
        return path


class BubblewrapSandbox:
    """Runs commands under ``bwrap`` at a given path."""

    def __init__(self, executable: str) -> None:
        """Use the bwrap binary at executable."""
        self.executable = executable

    @property
    def name(self) -> Literal["bubblewrap"]:
        """Always ``bubblewrap``."""
        return "bubblewrap"

    def flags(self, policy: SandboxPolicy, private_tmp: Path, cwd: Path) -> list[str]:
        """The bwrap flags (without the executable and the command) for policy."""
        flags = list(BASE_FLAGS)
        if not policy.network:
            flags.append("--unshare-net")
        # The private folder covers /tmp. What the command must still see below /tmp
        # (a workspace there) comes back read-only from its top folder, so that the
        # folders between /tmp and the workspace are not scaffolding it could rename.
        flags += ["--bind", str(private_tmp), _TMP]
        private = private_tmp.resolve()
        writable = [r for r in policy.writable(private_tmp) if r != private]
        for top in tops_under_tmp([policy.workspace.resolve(), *writable]):
            flags += ["--ro-bind", top, top]
        for root in writable:
            flags += ["--bind", str(root), str(root)]
        for path in policy.pinned:
            flags += ["--bind", str(path), str(path)]
        for path in policy.read_only:
            flags += ["--ro-bind", str(path), str(path)]
        flags += ["--seccomp", _FILTER_FD, "--chdir", str(cwd)]
        return flags

    def launch(
        self,
        argv: Sequence[str],
        policy: SandboxPolicy,
        *,
        cwd: Path,
        env: Mapping[str, str],
        private_tmp: Path,
    ) -> Launch:
        """``bwrap FLAGS -- argv`` with ``TMPDIR=/tmp``, behind ``sh`` opening the filter.

        In ``proxy`` network mode the argv starts behind the egress bridge and
        the environment names the proxy (:mod:`zuno.execution.sandbox.egress`).
        """
        if policy.egress_fd is not None:
            argv = bridged(argv, policy.egress_fd)
            env = proxy_environment(env)
        wrapped = [self.executable, *self.flags(policy, private_tmp, cwd), "--", *argv]
        # sh opens the filter on the descriptor bwrap reads, then becomes bwrap.
        opener = f'exec "$@" {_FILTER_FD}<"$0"'
        filter_file = command_filter_file(policy.network)
        wrapped = ["/bin/sh", "-c", opener, str(filter_file), *wrapped]
        return Launch.with_tmpdir(wrapped, env, cwd=cwd, private_tmp=private_tmp, tmp_inside=_TMP)
