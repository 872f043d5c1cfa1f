"""No sandbox: the command runs with the runtime's own rights.

Used only when the configuration names it (``sandbox.kind = "none"``) or asks
for ``full-access`` mode; ``auto`` never falls back to it. Nothing the command
starts outlives it or Zuno, even when Zuno is killed outright: it runs under a
small guard (``_guard.py``), a subreaper that kills everything still below it
when the command ends or when Zuno's process is gone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from zuno.execution.sandbox.policy import GUARD, Launch, SandboxPolicy

__all__ = ["NoSandbox"]


class NoSandbox:
    """Runs argv as it is; only the private temporary folder is arranged."""

    @property
    def name(self) -> Literal["none"]:
        """Always ``none``."""
        return "none"

    def launch(
        self,
        argv: Sequence[str],
        policy: SandboxPolicy,
        *,
        cwd: Path,
        env: Mapping[str, str],
        private_tmp: Path,
    ) -> Launch:
        """argv under the guard, with ``TMPDIR`` pointing at the private folder."""
        guard = [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), *policy.guard_options]
        guarded = [*guard, "--", *argv]
        return Launch.with_tmpdir(guarded, env, cwd=cwd, private_tmp=private_tmp)
