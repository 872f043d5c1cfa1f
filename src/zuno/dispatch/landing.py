"""Where a write really lands, looked at again at the moment it lands.

The pre-flight matches permission rules and the control-file guard against
where each path leads when the call is admitted. A symlink swapped in after
that (by a command still running in the background) can redirect the write to
another place beneath the same root, which :mod:`zuno.workspace.beneath` allows: inside
the workspace is inside. So the file tools look once more, after opening the
folder they will write in, and refuse, before anything is written, a write that
a symlink leads onto

- a control file (``zuno.json``, ``.zuno/``, ``.git/``: see
  :func:`zuno.dispatch.preflight.is_control_file`), or
- a path a ``deny`` or ``ask`` rule covers,

when the path as the call names it is neither. A path named directly was
checked by the pre-flight; only a redirection is refused, and it is refused
even when the link was already there and the user approved what it led to:
writing through a symlink onto a protected file is never needed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from zuno.contract.tool import ArgumentsRejected, ToolContext
from zuno.dispatch.preflight import is_control_file
from zuno.policy.permissions import rule_matches
from zuno.workspace.beneath import Confined
from zuno.workspace.real_paths import TouchedPath, is_inside, relative_subject

__all__ = ["LandingGuard", "Redirected", "landing_guard"]

LandingGuard = Callable[[Confined, Path], None]
"""Called with the path as asked and where it really lands; raises :class:`Redirected`."""


class Redirected(ArgumentsRejected):
    """A symlink redirects a write onto a protected path; nothing was written."""


def landing_guard(ctx: ToolContext, tool: str) -> LandingGuard:
    """The check of one call's writes, with the rules in force for it.

    Args:
        ctx: The call's context (its workspace and permission settings).
        tool: The tool's name, as rules name it.
    """
    given = os.path.normpath(ctx.workspace)
    workspace = os.path.realpath(given)
    permissions = ctx.permissions
    rules = [r for r in permissions.rules if r.action != "allow"] if permissions else []

    def protected(subject: str, real: str) -> str | None:
        touched = TouchedPath(
            given=subject,
            lexical=subject,
            real=subject,
            real_abs=real,
            inside=is_inside(real, workspace),
            writes=True,
            refusal=None,
        )
        if is_control_file(touched):
            return "a control file (zuno.json, .zuno/, .git/)"
        for rule in rules:
            if rule_matches(rule, tool, subject, "path"):
                return f"a path an {rule.action} rule covers ({rule.pattern})"
        return None

    def subject_of(path: str) -> str:
        # The root may be named by the workspace as given or by its real path.
        for name in (given, workspace):
            if is_inside(path, name):
                return relative_subject(path, name)
        return path

    def check(asked: Confined, lands: Path) -> None:
        asked_abs = os.path.normpath(asked.path)
        real = os.path.normpath(lands)
        if real == asked_abs:
            return  # no symlink on the way: the pre-flight saw this very path
        subject = subject_of(real)
        what = protected(subject, real)
        if what is not None and protected(subject_of(asked_abs), asked_abs) is None:
            raise Redirected(
                f"{asked.path} leads through a symlink to {subject}, {what}; nothing was "
                "written. Write to that path directly if it is really meant"
            )

    return check
