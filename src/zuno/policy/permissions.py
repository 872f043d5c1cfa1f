"""Authorization: permission modes and rules, and when a call is asked about.

A session runs in one of four modes (``permission.mode``, or chosen per
session with ``--mode`` and switched by the user while it runs):

- ``plan``: only ReadOnly calls, ``question``, and updates of the session's
  plan, todos and goal (not asked about). Everything else is refused
  (``blocked: denied``) before anyone is asked.
- ``accept-edits``: as ``strict``, except that a file edit (a tool that
  ``writes_files``) whose every path is inside the workspace is not asked
  about. Control files are still asked about; so are commands.
- ``strict`` (the default): a SideEffecting or Delegating call must be
  approved, and so must a read-only call that reaches outside the workspace or
  fetches from an unlisted host.
- ``permissive``: nothing is asked (control files aside).

A call is authorized in these steps:

1. The rules of ``permission.rules`` (and the agent's own) that match the call
   are collected. A deny rule denies in every mode.
2. Plan mode refuses what it does not admit: it is stronger than any ask or
   allow rule (an allow rule cannot let a write through in plan mode).
3. Otherwise ask beats allow among the matching rules. A call touching several
   paths (or one path by a name that is not its real location) is matched on
   each: a deny or ask on any of them applies, an allow must cover all of them.
   With no allow rule covering it, a command that a ``deny`` or ``ask`` rule
   on commands cannot see into is asked about
   (:func:`zuno.policy.shell_rules.command_unseen`).
4. With no matching rule, the mode's default decides (the list above).
5. An ``ask`` goes to the :class:`~zuno.policy.approvals.Approver`, bound to that exact call: the
   tool and its normalized arguments (:func:`fingerprint`). "Approve for the
   session" remembers that fingerprint, nothing broader, except where the tool
   names a wider scope (``webfetch``: every fetch from that host; ``write_stdin``:
   one process, covered by any yes). The person may also approve and switch the
   session to ``accept-edits``, deny with words for the model, or keep a rule
   (an :class:`~zuno.policy.approvals.ApprovalAnswer`), which holds for the rest of the session.

Updates of the session's own plan, todos and goal (:data:`WORK_STATE_UPDATES`)
are never asked about, in any mode; a deny rule still refuses them.

What the runtime guards whatever the rules say (process secrets, control
files) is in :mod:`zuno.dispatch.preflight` and :mod:`zuno.workspace.real_paths`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any, Literal

from zuno.config.agents import AgentSettings
from zuno.config.permission import PermissionMode, PermissionRule, PermissionSettings
from zuno.core.declarations import Declaration, Effect
from zuno.policy.shell_rules import command_rule_matches, command_unseen

__all__ = [
    "MODES",
    "WORK_STATE_UPDATES",
    "PermissionMode",
    "Verdict",
    "canonical_json",
    "effective_permissions",
    "evaluate",
    "fingerprint",
    "fingerprint_of",
    "path_pattern_matches",
    "plan_refusal",
    "rule_matches",
]

Action = Literal["allow", "ask", "deny"]
MatchKind = Literal["path", "prefix", "glob"]

MODES: tuple[PermissionMode, ...] = ("plan", "accept-edits", "strict", "permissive")
"""The permission modes, strictest first."""

WORK_STATE_UPDATES = frozenset({"plan_update", "todo_update", "goal_update"})
"""The tools that change only the session's own plan, todos and goal, kept in the store
(never the workspace): plan mode runs them, and no mode asks about them."""

PLAN_USER_MEDIATED = frozenset({"question"})
"""The user-mediated tools plan mode runs: a question changes nothing. Others (a
``memory_propose`` queues a row for a person to review) are refused like writes."""

_ASKING_MODES = frozenset({"plan", "accept-edits", "strict"})
"""The modes that ask what strict mode asks (accept-edits skips file edits)."""


def plan_refusal(tool: str, declaration: Declaration) -> str | None:
    """What plan mode tells the model about a call it refuses, or None when it admits it."""
    if declaration.effect is Effect.READ_ONLY:
        return None
    if declaration.effect is Effect.USER_MEDIATED and tool in PLAN_USER_MEDIATED:
        return None
    if tool in WORK_STATE_UPDATES:
        return None
    return (
        f"the session is in plan mode, so this {declaration.effect.value} call was not run: "
        "plan mode runs only reads, searches, questions and plan_update/todo_update/"
        "goal_update. Write the plan (plan_update) and present it; the user can switch the "
        "mode (accept-edits or strict) to carry it out"
    )


def canonical_json(arguments: dict[str, Any]) -> str:
    """Normalized arguments as one canonical text (sorted keys, no spaces)."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint_of(tool: str, canonical: str) -> str:
    """A digest of one exact call from its canonical arguments."""
    return hashlib.sha256(f"{tool}\0{canonical}".encode()).hexdigest()


def fingerprint(tool: str, arguments: dict[str, Any]) -> str:
    """A digest of one exact call: the tool and its normalized arguments."""
    return fingerprint_of(tool, canonical_json(arguments))


@lru_cache(maxsize=512)
def _path_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("/**", i) and i + 3 == len(pattern):
            # "dir/**" covers the folder itself too: a deny on everything in it
            # also refuses listing or searching it.
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


def path_pattern_matches(pattern: str, subject: str) -> bool:
    """Whether a path rule pattern matches a path subject (``*`` one folder, ``**`` any depth).

    ``dir/**`` also matches ``dir`` itself.
    """
    return _path_regex(pattern).match(subject) is not None


_COMMAND_LINE_TOOLS = frozenset({"shell", "exec_command"})
"""Tools whose subject is a command line run by a shell: a rule naming one governs all."""


def rule_matches(rule: PermissionRule, tool: str, subject: str | None, kind: MatchKind) -> bool:
    """Whether a rule applies to a call of ``tool`` whose main argument is ``subject``.

    A rule written for ``shell`` also holds for ``exec_command`` (and the other way
    round): the same command started on a terminal must not walk around it. What is
    typed into a process (``write_stdin``) is held to their deny rules too: a command
    typed into a shell is still that command. Their allow and ask rules do not cover
    typing (``write_stdin`` rules do).
    """
    if (
        tool == "write_stdin"
        and rule.action == "deny"
        and any(fnmatchcase(other, rule.tool) for other in _COMMAND_LINE_TOOLS)
    ):
        return rule.pattern in ("*", "**") or (
            subject is not None and command_rule_matches(rule.pattern, rule.action, subject)
        )
    if not _names_tool(rule, tool):
        return False
    if rule.pattern in ("*", "**"):
        return True
    if subject is None:
        return False
    if kind == "path":
        return _path_regex(rule.pattern).match(subject) is not None
    if kind == "prefix":
        # Matched on bash's parse, not the text: an allow covers one plain
        # command only; deny/ask see every command, however spelled or wrapped.
        return command_rule_matches(rule.pattern, rule.action, subject)
    return fnmatchcase(subject, rule.pattern)


def _names_tool(rule: PermissionRule, tool: str) -> bool:
    return (
        rule.tool == "*"
        or fnmatchcase(tool, rule.tool)
        or (
            tool in _COMMAND_LINE_TOOLS
            and any(fnmatchcase(other, rule.tool) for other in _COMMAND_LINE_TOOLS)
        )
    )


def _unseen_under_rule(
    settings: PermissionSettings, tool: str, subjects: list[str | None], kind: MatchKind
) -> Verdict | None:
    """An approval for a command a deny or ask rule on commands cannot see into.

    Such a rule is enforced on what the parse sees; a program not known to be
    inert (``python3``, ``prlimit``, ``git -c``) may run the denied command
    where no parse can see it, so while the rule is in force it is asked about.
    """
    if kind != "prefix":
        return None
    for rule in settings.rules:
        # A rule for every tool ("*") is usually a path rule (`.env`): only rules
        # written for the command tools make every unseen command ask.
        if (
            rule.action == "allow"
            or rule.tool == "*"
            or rule.pattern in ("*", "**")
            or not _names_tool(rule, tool)
        ):
            continue
        for subject in subjects:
            unseen = command_unseen(subject) if subject is not None else None
            if unseen is not None:
                return Verdict(
                    "ask",
                    f"{unseen}, and the {rule.action} rule on {rule.pattern!r} cannot see "
                    "what it runs",
                )
    return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The authorization of one call before any approver is asked."""

    action: Action
    reason: str
    rule: PermissionRule | None = None


def effective_permissions(
    base: PermissionSettings, agent: AgentSettings | None
) -> PermissionSettings:
    """The agent's overrides over the file's: its mode, its rules and read roots added."""
    if agent is None or agent.permission is None:
        return base
    return PermissionSettings(
        mode=agent.permission.mode,
        rules=[*agent.permission.rules, *base.rules],
        read_roots=[*agent.permission.read_roots, *base.read_roots],
    )


def evaluate(
    settings: PermissionSettings,
    tool: str,
    declaration: Declaration,
    subject: str | Sequence[str] | None,
    kind: MatchKind,
    *,
    strict_reason: str | None = None,
    edit_inside: bool = False,
) -> Verdict:
    """Deny rules, plan mode's refusal, ask and allow rules, then the mode's default.

    Args:
        settings: The session's mode and rules.
        tool: The tool's name.
        declaration: The call's declaration (its effect decides strict mode's default).
        subject: What rule patterns are matched against: one string, several (every
            path a call touches, as named and as really reached), or None.
        kind: How patterns match (``path``, ``prefix``, ``glob``).
        strict_reason: Why strict mode asks for this call although its effect
            alone would not (a read outside the workspace, a fetch from an
            unlisted host). An allow rule covering the call still lets it through.
        edit_inside: The call is a file edit whose every path is inside the
            workspace and none a control file (``accept-edits`` lets it through).

    With several subjects a deny or ask rule applies when it matches any of
    them, and allow rules apply only when every subject is matched by one: a
    call reaching one path no rule allows is not allowed by rule.
    """
    subjects: list[str | None] = (
        [subject] if subject is None or isinstance(subject, str) else [*subject]
    ) or [None]
    for action in ("deny", "ask"):
        if action == "ask" and tool in WORK_STATE_UPDATES:
            # Only the session's own plan, todos or goal change: nothing to ask about.
            return Verdict("allow", "an update of the session's own work state (never asked)")
        if action == "ask" and settings.mode == "plan":
            # Plan mode is stronger than ask and allow rules: what it refuses,
            # no rule and no approver can let through.
            refusal = plan_refusal(tool, declaration)
            if refusal is not None:
                return Verdict("deny", refusal)
        for rule in settings.rules:
            if rule.action == action and any(rule_matches(rule, tool, s, kind) for s in subjects):
                return _rule_verdict(rule)
    allows = [r for r in settings.rules if r.action == "allow"]
    covering = [next((r for r in allows if rule_matches(r, tool, s, kind)), None) for s in subjects]
    if allows and all(covering):
        rule = covering[0]
        assert rule is not None
        return _rule_verdict(rule)
    unseen = _unseen_under_rule(settings, tool, subjects, kind)
    if unseen is not None:
        return unseen
    mode = settings.mode
    asks = mode in _ASKING_MODES
    if asks and declaration.effect in (Effect.SIDE_EFFECTING, Effect.DELEGATING):
        if mode == "accept-edits" and edit_inside and strict_reason is None:
            return Verdict("allow", "accept-edits mode: a file edit inside the workspace")
        return Verdict("ask", f"strict mode: {declaration.effect.value} calls need approval")
    if asks and strict_reason is not None:
        return Verdict("ask", f"strict mode: {strict_reason}")
    return Verdict("allow", f"{declaration.effect.value} call in {mode} mode")


def _rule_verdict(rule: PermissionRule) -> Verdict:
    where = f" matching {rule.pattern!r}" if rule.pattern not in ("*", "**") else ""
    return Verdict(rule.action, f"rule '{rule.action} {rule.tool}'{where}", rule)
