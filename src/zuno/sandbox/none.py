"""No sandbox: the command runs with the runtime's own rights.

Used only when the configuration names it (``sandbox.kind = "none"``) or asks
for ``full-access`` mode; ``auto`` never falls back to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from zuno.sandbox.policy import Launch, SandboxPolicy

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
        """argv unchanged, with ``TMPDIR`` pointing at the private folder."""
        return Launch.with_tmpdir(argv, env, cwd=cwd, private_tmp=private_tmp)
