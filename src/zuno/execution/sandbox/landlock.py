"""The Landlock sandbox: kernel path rules applied by a small exec helper.

Landlock restricts the process that asks for it and every process it starts;
it cannot be applied to another process. So the launch runs
``_landlock_exec.py`` (standard library only, started with ``python -I -S``)
which restricts itself and then execs the command. Everything stays readable;
only the policy's writable folders and a few device files can be written, and
with the network off TCP bind and connect are refused (ABI 4 or newer).

Like bubblewrap, the helper also gives the command its own PID, mount and
IPC namespaces (and a network namespace with the network off, where a socket
filter also keeps it from the host's UNIX sockets): when the command exits or
is killed, nothing it started survives it, and it sees only its own processes.
The workspace's control files are bound read-only over the writable workspace,
and the command's private temporary folder is mounted over ``/tmp``, as under
bubblewrap. Every command also gets the seccomp filter of
:mod:`zuno.execution.sandbox._seccomp`: no ptrace, no kernel keyring, no TIOCSTI.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from zuno.execution.sandbox._landlock_exec import abi_version
from zuno.execution.sandbox.egress import PROXY_PORT, bridged, proxy_environment
from zuno.execution.sandbox.policy import Launch, SandboxPolicy, tops_under_tmp

__all__ = ["HELPER", "WRITABLE_DEVICES", "LandlockSandbox", "abi_version"]

_TMP = Path("/tmp")

HELPER = Path(__file__).with_name("_landlock_exec.py")
"""The script that restricts itself and execs the command."""

WRITABLE_DEVICES: tuple[str, ...] = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
)
"""Device files commands commonly write to; writing them changes nothing that lasts."""


class LandlockSandbox:
    """Runs commands under a Landlock ruleset built from the policy."""

    def __init__(self, python: str | None = None) -> None:
        """Use python (this interpreter by default) to run the exec helper."""
        self._python = python or sys.executable

    @property
    def name(self) -> Literal["landlock"]:
        """Always ``landlock``."""
        return "landlock"

    def launch(
        self,
        argv: Sequence[str],
        policy: SandboxPolicy,
        *,
        cwd: Path,
        env: Mapping[str, str],
        private_tmp: Path,
    ) -> Launch:
        """The helper's argv carrying the ruleset, then ``--`` and argv.

        The private folder is mounted over ``/tmp`` (and ``TMPDIR`` is ``/tmp``),
        unless the workspace or a writable root is ``/tmp`` or holds it: the
        command may write there anyway, and the private folder is then only
        ``TMPDIR``.
        """
        if policy.egress_fd is not None:
            argv = bridged(argv, policy.egress_fd, self._python)
            env = proxy_environment(env, self._python)
        private = private_tmp.resolve()
        others = [p for p in policy.writable(private_tmp) if p != private]
        workspace = policy.workspace.resolve()
        cover_tmp = not any(_TMP.is_relative_to(p) for p in (workspace, *others))
        rules: dict[str, object] = {
            "write_dirs": [str(p) for p in policy.writable(private_tmp)],
            "write_files": list(WRITABLE_DEVICES),
            "network": policy.network,
            "egress_port": PROXY_PORT if policy.egress_fd is not None else None,
            "read_only": [str(p) for p in policy.read_only],
            "pinned": [str(p) for p in policy.pinned],
            "parent": os.getpid(),  # the command dies with this process, even on SIGKILL
        }
        if cover_tmp:
            rules["write_dirs"] = [str(_TMP), *(str(p) for p in others)]
            rules["private_tmp"] = str(private)
            rules["tmp_tops"] = tops_under_tmp([workspace, *others])
        wrapped = [self._python, "-I", "-S", str(HELPER), json.dumps(rules), "--", *argv]
        inside = str(_TMP) if cover_tmp else None
        return Launch.with_tmpdir(wrapped, env, cwd=cwd, private_tmp=private_tmp, tmp_inside=inside)
