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
The workspace's control files are bound read-only over the writable workspace.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from zuno.sandbox._landlock_exec import abi_version
from zuno.sandbox.policy import Launch, SandboxPolicy

__all__ = ["HELPER", "WRITABLE_DEVICES", "LandlockSandbox", "abi_version"]

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
        """The helper's argv carrying the ruleset, then ``--`` and argv."""
        rules = {
            "write_dirs": [str(p) for p in policy.writable(private_tmp)],
            "write_files": list(WRITABLE_DEVICES),
            "network": policy.network,
            "read_only": [str(p) for p in policy.read_only],
            "pinned": [str(p) for p in policy.pinned],
            "parent": os.getpid(),  # the command dies with this process, even on SIGKILL
        }
        wrapped = [self._python, "-I", "-S", str(HELPER), json.dumps(rules), "--", *argv]
        return Launch.with_tmpdir(wrapped, env, cwd=cwd, private_tmp=private_tmp)
