"""What a sandboxed command may do, and the launch a sandbox makes of it.

A :class:`SandboxPolicy` is the sandbox-independent statement of one command's
limits (writable folders, network). A :class:`Sandbox` turns a policy and an
argv into a :class:`Launch`: the argv that actually starts (``bwrap ... --``,
the Landlock helper, or the argv itself) and the environment it gets.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Generator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Protocol

from zuno.config.sandbox import SandboxMode
from zuno.execution.sandbox.control_files import held_control_files, sealed_folders

__all__ = [
    "GUARD",
    "Launch",
    "Sandbox",
    "SandboxError",
    "SandboxPolicy",
    "prepared_launch",
    "tops_under_tmp",
]

BackendName = Literal["bubblewrap", "landlock", "none"]

GUARD = Path(__file__).with_name("_guard.py")
"""The guard every command runs under (see ``_guard.py``)."""


def tops_under_tmp(paths: Sequence[Path]) -> list[str]:
    """The first-level folders of /tmp that hold one of paths, sorted.

    A sandbox that gives the command a private ``/tmp`` shows these again (read-only)
    so that a workspace or a writable folder under ``/tmp`` stays reachable.
    """
    tmp = Path("/tmp")
    tops: set[str] = set()
    for p in paths:
        if p.is_relative_to(tmp) and p != tmp:
            tops.add(str(tmp / p.relative_to(tmp).parts[0]))
    return sorted(tops)


class SandboxError(Exception):
    """A requested sandbox cannot start. A startup error, never a silent fallback."""


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """The limits of one command, whatever sandbox enforces them.

    Attributes:
        mode: What may be written (see :data:`zuno.config.sandbox.SandboxMode`).
        workspace: The workspace folder (writable in ``workspace-write``).
        network: Whether the command may use the network.
        writable_roots: Extra writable folders in ``workspace-write`` mode.
        read_only: Paths inside the writable folders that stay read-only (the
            workspace's control files and Zuno's own folders; filled in by
            :func:`prepared_launch`, which makes sure each exists while the
            command runs).
        protected: Zuno's own folders and files (config folder, trust store,
            data folder, command server's run folder), as Zuno names them:
            read-only for the command wherever they lie (see
            :func:`zuno.execution.sandbox.control_files.sealed_folders`).
        pinned: Folders bound over themselves so they cannot be renamed or
            removed (filled in by :func:`prepared_launch`).
        egress_fd: In ``proxy`` network mode (``network`` is then false), the
            descriptor of the call's end of its proxy socket pair (see
            :mod:`zuno.execution.sandbox.egress`); the command starts behind the bridge.
        guard_options: The hard deadline of the command's guard
            (``sandbox/_guard.py``; filled in by :func:`prepared_launch`): the
            ``none`` sandbox hands them to the guard it runs every command under.
    """

    mode: SandboxMode
    workspace: Path
    network: bool = False
    writable_roots: tuple[Path, ...] = ()
    read_only: tuple[Path, ...] = ()
    protected: tuple[Path, ...] = ()
    pinned: tuple[Path, ...] = ()
    egress_fd: int | None = None
    guard_options: tuple[str, ...] = ()

    def writable(self, private_tmp: Path) -> list[Path]:
        """The folders a command may write, parents before children.

        The private temporary folder is writable in every mode: it is discarded
        after the command, so writing there changes nothing that lasts.
        """
        roots = [private_tmp]
        if self.mode == "workspace-write":
            roots.append(self.workspace)
            roots.extend(r for r in self.writable_roots if r.is_dir())
        return sorted({p.resolve() for p in roots}, key=lambda p: len(p.parts))


@dataclass(slots=True)
class Launch:
    """What to start for one sandboxed command.

    Attributes:
        argv: The argv to execute (the sandbox wrapper first, if any).
        env: The complete environment of the started process.
        cwd: The working directory, as seen from outside the sandbox.
        private_tmp: The command's private temporary folder on the host.
        tmp_inside: The same folder as the command sees it (``TMPDIR``).
        pass_fds: Descriptors the started process inherits (the proxy's).
    """

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    private_tmp: Path
    tmp_inside: str = field(default="")
    pass_fds: tuple[int, ...] = ()

    @classmethod
    def with_tmpdir(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        cwd: Path,
        private_tmp: Path,
        tmp_inside: str | None = None,
    ) -> Launch:
        """A launch whose ``TMPDIR`` is the private folder as the command sees it.

        Args:
            argv: The argv to execute.
            env: The environment, to which ``TMPDIR`` is added.
            cwd: The working directory.
            private_tmp: The private temporary folder on the host.
            tmp_inside: Its path inside the sandbox; the host path when omitted
                (a sandbox without its own mount namespace).
        """
        inside = str(private_tmp) if tmp_inside is None else tmp_inside
        return cls(
            argv=list(argv),
            env={**env, "TMPDIR": inside},
            cwd=cwd,
            private_tmp=private_tmp,
            tmp_inside=inside,
        )


class Sandbox(Protocol):
    """A way of running commands under a :class:`SandboxPolicy`."""

    @property
    def name(self) -> BackendName:
        """``bubblewrap``, ``landlock`` or ``none``."""
        ...

    def launch(
        self,
        argv: Sequence[str],
        policy: SandboxPolicy,
        *,
        cwd: Path,
        env: Mapping[str, str],
        private_tmp: Path,
    ) -> Launch:
        """The launch of argv under policy, with private_tmp as its temporary folder."""
        ...


@contextmanager
def prepared_launch(
    sandbox: Sandbox,
    argv: Sequence[str],
    policy: SandboxPolicy,
    *,
    cwd: Path,
    env: Mapping[str, str],
    deadline: bool = False,
    time_limit: float | None = None,
) -> Generator[Launch]:
    """A launch with a fresh private temporary folder, removed on exit.

    In ``workspace-write`` mode under a real sandbox, the workspace's control
    files (see :mod:`zuno.execution.sandbox.control_files`) are held read-only for as long
    as the context is open. Keep it open for as long as the command (and
    anything it left running) may run: for a background job, the job's lifetime.

    With ``deadline``, the command runs under a guard that kills its tree at
    its hard deadline by itself (:func:`zuno.durability.fencing.command_deadline`: its
    ``time_limit``, and this worker's fence deadline): beside the command
    without a sandbox; inside bubblewrap and Landlock when this worker's store
    is shared by machines (:func:`zuno.durability.fencing.across_hosts`; on one machine the
    fence guard and the sandbox's own init suffice).
    """
    from zuno.durability import fencing

    with ExitStack() as stack:
        fence_fd: tuple[int, ...] = ()
        if deadline and (sandbox.name == "none" or fencing.across_hosts()):
            # A guard's interpreter costs a command under a sandbox some tens of ms:
            # only where another machine may take the session over. Without a
            # sandbox the command has a guard anyway.
            options, read_end = stack.enter_context(fencing.command_deadline(time_limit))
            fence_fd = (read_end,)
            if sandbox.name == "none":
                policy = replace(policy, guard_options=tuple(options))
            else:
                argv = [sys.executable, "-I", "-S", str(GUARD), "0", *options, "--", *argv]
        if sandbox.name != "none" and policy.mode == "workspace-write":
            held = stack.enter_context(held_control_files(policy.workspace, policy.writable_roots))
            policy = replace(policy, read_only=(*policy.read_only, *held))
        private_tmp = Path(tempfile.mkdtemp(prefix="zuno-tmp-"))
        if sandbox.name != "none" and policy.protected:
            writable = [p for p in policy.writable(private_tmp) if p != private_tmp.resolve()]
            sealed = sealed_folders(policy.protected, writable)
            policy = replace(
                policy,
                read_only=(*sealed.read_only, *policy.read_only),
                pinned=(*policy.pinned, *sealed.pinned),
            )
        stack.callback(shutil.rmtree, private_tmp, ignore_errors=True)
        launch = sandbox.launch(argv, policy, cwd=cwd, env=env, private_tmp=private_tmp)
        if policy.egress_fd is not None:
            if sandbox.name == "none":
                raise SandboxError(
                    'sandbox.network is "proxy", which needs bubblewrap or Landlock; '
                    "set sandbox.kind to one of them, or sandbox.network to true or false"
                )
            launch.pass_fds = (policy.egress_fd,)
        launch.pass_fds = (*launch.pass_fds, *fence_fd)
        yield launch
