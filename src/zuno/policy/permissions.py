"""Authorization: permission modes, rules and approvals.

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
5. An ``ask`` goes to the :class:`Approver`, bound to that exact call: the
   tool and its normalized arguments (:func:`fingerprint`). "Approve for the
   session" remembers that fingerprint, nothing broader, except where the tool
   names a wider scope (``webfetch``: every fetch from that host; ``write_stdin``:
   one process, covered by any yes). The person may also approve and switch the
   session to ``accept-edits``, deny with words for the model, or keep a rule
   (an :class:`ApprovalAnswer`), which holds for the rest of the session.

Updates of the session's own plan, todos and goal (:data:`WORK_STATE_UPDATES`)
are never asked about, in any mode; a deny rule still refuses them.

What the runtime guards whatever the rules say (process secrets, control
files) is in :mod:`zuno.dispatch.preflight` and :mod:`zuno.workspace.real_paths`.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any, Literal, Protocol

import anyio
import anyio.to_thread

from zuno.config.agents import AgentSettings
from zuno.config.permission import PermissionMode, PermissionRule, PermissionSettings
from zuno.core.declarations import Declaration, Effect
from zuno.policy.shell_rules import command_rule_matches, command_unseen

__all__ = [
    "MODES",
    "WORK_STATE_UPDATES",
    "ApprovalAnswer",
    "ApprovalDecision",
    "ApprovalRequest",
    "ApproveAll",
    "Approver",
    "CallbackApprover",
    "DenyAll",
    "PermissionMode",
    "TerminalApprover",
    "Verdict",
    "answer_of",
    "canonical_json",
    "default_approver",
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


class ApprovalDecision(StrEnum):
    """What a person (or program) said about one call."""

    APPROVE_ONCE = "once"
    APPROVE_SESSION = "session"
    """Approve this exact call (same tool, same arguments) for the rest of the session,
    or what the request's ``covers`` names (a webfetch: that host)."""
    DENY = "deny"
    ACCEPT_EDITS = "accept-edits"
    """Approve this call once and switch the session to ``accept-edits`` mode: file
    edits inside the workspace are not asked about again."""


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    """A decision with what came with it: the person's words, or a rule they chose.

    An approver may return this instead of a bare :class:`ApprovalDecision`.
    """

    decision: ApprovalDecision
    message: str = ""
    """What the person said for the model (a denial's reason); "" for nothing."""
    rule: PermissionRule | None = None
    """A rule the person chose ("always" generalised): it holds for the rest of the
    session (saving it to a configuration file is the approver's business)."""


def answer_of(answer: ApprovalDecision | ApprovalAnswer) -> ApprovalAnswer:
    """An approver's return value as an :class:`ApprovalAnswer`."""
    return answer if isinstance(answer, ApprovalAnswer) else ApprovalAnswer(answer)


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One call waiting for approval."""

    session_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    declaration: Declaration
    preview: str
    reason: str
    fingerprint: str
    covers: str = "this exact call"
    """What approving for the session covers, in words ("this exact call", "fetches from
    docs.python.org")."""
    offers_accept_edits: bool = False
    """Whether the person is offered to answer "yes, and accept file edits from now on"
    (:attr:`ApprovalDecision.ACCEPT_EDITS`): a file edit asked about in strict mode."""
    network_hosts: tuple[str, ...] = ()
    """Hosts the call asks to reach beyond ``sandbox.network_allow`` (``proxy`` network
    mode). A yes grants them to this call only; "always" (:attr:`ApprovalDecision.
    APPROVE_SESSION`) to every command of the session, and a terminal may also save
    them to the user's ``sandbox.network_allow``."""


class Approver(Protocol):
    """Decides approval requests. Implementations must be safe to call concurrently.

    ``decide`` returns a decision, or an :class:`ApprovalAnswer` when the person
    said more (why not, or a rule to keep).
    """

    name: str

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision | ApprovalAnswer: ...


class DenyAll:
    """No one to ask: every request is denied (the default without a terminal)."""

    name = "deny (no terminal)"

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision.DENY


class ApproveAll:
    """Approves every request once (``--yes``)."""

    name = "approve all (--yes)"

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision.APPROVE_ONCE


Callback = Callable[
    [ApprovalRequest], "ApprovalDecision | bool | Awaitable[ApprovalDecision | bool]"
]


class CallbackApprover:
    """Approvals from a program embedding Zuno: a sync or async callable.

    The callable returns an :class:`ApprovalDecision`, or a bool (True approves once).
    """

    name = "callback"

    def __init__(self, callback: Callback) -> None:
        self._callback = callback

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        answer = self._callback(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, ApprovalDecision):
            return answer
        return ApprovalDecision.APPROVE_ONCE if answer else ApprovalDecision.DENY


class TerminalApprover:
    """Asks the person at the terminal, one request at a time, one key per answer.

    The prompt names the call in plain words and shows what it would change (a
    coloured diff, the first lines of a new file, the command); see :func:`_prompt_segments`.
    The keys: ``y`` yes this once, ``n`` no, ``a`` always (:meth:`always`), ``t`` no and
    a line of text the model receives, ``e`` (file edits in strict mode) yes and stop
    asking about edits. Ctrl-C at the prompt interrupts it at once (see :mod:`zuno.core.tty`).
    """

    name = "terminal"

    def __init__(self, ask: Callable[[str], str] | None = None) -> None:
        """Ask at the terminal, or through ``ask`` (a blocking callable given the prompt,
        whose answer's first character is the key)."""
        self._lock = anyio.Lock()
        self._ask = ask

    async def line(self, prompt: Segments) -> str:
        """A line of text typed after the prompt."""
        if self._ask is None:
            from zuno.core.tty import ask_line

            return await ask_line(prompt)
        return await anyio.to_thread.run_sync(self._ask, _plain(prompt), abandon_on_cancel=True)

    async def key(self, prompt: Segments, keys: str) -> str:
        """One key of ``keys`` (Escape is ``"\\x1b"``; "" when no one answers)."""
        if self._ask is None:
            from zuno.core.tty import ask_key

            return await ask_key(prompt, keys)
        answer = await anyio.to_thread.run_sync(self._ask, _plain(prompt), abandon_on_cancel=True)
        return answer.strip().lower()[:1]

    async def always(self, request: ApprovalRequest) -> ApprovalDecision | ApprovalAnswer:
        """The answer ``a``: approve what the request ``covers`` for the session."""
        return ApprovalDecision.APPROVE_SESSION

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision | ApprovalAnswer:
        async with self._lock:
            keys = "ynate" if request.offers_accept_edits else "ynat"
            prompt = _prompt_segments(request)
            while True:
                choice = await self.key(prompt, keys)
                if choice == "y":
                    return ApprovalDecision.APPROVE_ONCE
                if choice in ("n", "", "\x1b"):
                    return ApprovalDecision.DENY
                if choice == "a":
                    return await self.always(request)
                if choice == "e" and request.offers_accept_edits:
                    return ApprovalDecision.ACCEPT_EDITS
                if choice == "t":
                    why = (await self.line([("  tell the model why: ", "bold")])).strip()
                    return ApprovalAnswer(ApprovalDecision.DENY, message=why)
                prompt = [(f"Please press {_key_list(request)}: ", "")]


def _key_list(request: ApprovalRequest) -> str:
    edits = ", e (yes, and accept file edits from now on)" if request.offers_accept_edits else ""
    return f"y (yes, once), n (no), a (always), t (no, and tell the model why){edits}"


Segments = list[tuple[str, str]]
"""Styled prompt text: (text, rich style) pairs."""

_PREVIEW_LINES = 40
_NEW_FILE_LINES = 10
_LINE_WIDTH = 240
_STRICT_DEFAULT = re.compile(r"strict mode: \w+ calls need approval")


def _why(reason: str) -> str | None:
    """Why the call is asked about, when it is more than "it changes things"."""
    if _STRICT_DEFAULT.fullmatch(reason):
        return None  # the default for any change: saying so adds nothing
    if reason.startswith("strict mode: "):
        return reason[len("strict mode: ") :]
    if reason.startswith("rule "):
        return f"your {reason} asks first"
    return reason


def _cut_lines(lines: list[str], limit: int) -> list[str]:
    if len(lines) <= limit:
        return lines
    return [*lines[:limit], f"... {len(lines) - limit} more lines"]


def _write_parts(request: ApprovalRequest) -> tuple[str, list[str]]:
    """A write's summary and body: the new file's first lines, or the diff of a replacement."""
    from zuno.contract.call_text import count_lines, plural

    content = str(request.arguments.get("content", ""))
    path = request.arguments.get("path")
    size = plural(count_lines(content), "line")
    first, _, rest = request.preview.partition("\n")
    if ": new file," in first:
        lines = ["+" + line for line in content.splitlines()]
        return f"write {path} (new file, {size})", _cut_lines(lines, _NEW_FILE_LINES)
    if ": replaces the file (" in first:
        return f"write {path} (replaces the file, {size})", rest.splitlines()
    detail = first.split(": ", 1)[1] if ": " in first else first
    return f"write {path} ({size})", [detail]


def _body(request: ApprovalRequest) -> tuple[str, list[str]]:
    """The one-line summary of the call and the lines shown above the question."""
    from zuno.contract.call_text import describe_call, snippet_diff

    tool, values = request.tool, request.arguments
    if tool == "write":
        return _write_parts(request)
    summary = describe_call(tool, values)
    if tool == "edit":
        old, new = str(values.get("old_string", "")), str(values.get("new_string", ""))
        return summary, snippet_diff(old, new)
    if tool == "apply_patch":
        return summary, request.preview.splitlines()
    if tool == "shell":
        command = str(values.get("command", ""))
        return summary, command.splitlines() if "\n" in command.strip() else []
    if tool in ("task", "council_run"):
        return summary, request.preview.splitlines()
    return summary, []


def _prompt_segments(request: ApprovalRequest) -> Segments:
    from zuno.contract.call_text import diff_style

    summary, body = _body(request)
    parts: Segments = [("\n", "")]
    for line in _cut_lines(body, _PREVIEW_LINES):
        shown = line if len(line) <= _LINE_WIDTH else line[: _LINE_WIDTH - 3] + "..."
        parts.append((f"  {shown}\n", diff_style(line)))
    why = _why(request.reason)
    if why:
        parts.append((f"  ({why})\n", "dim"))
    always = "[a]lways"
    if request.network_hosts:
        always = f"[a]lways (reach {', '.join(request.network_hosts)} in this session or later)"
    elif request.covers != "this exact call":
        always = f"[a]lways for {request.covers}"
    edits = " / [e] yes, and accept file edits from now on" if request.offers_accept_edits else ""
    parts.append((summary, "bold"))
    parts.append((f": allow? [y]es / [n]o / {always} / [t] no, tell the model why{edits} ", ""))
    return parts


def _plain(prompt: Segments) -> str:
    """A prompt as plain text, for an ``ask`` callable."""
    return "".join(text for text, _style in prompt)


def default_approver(interactive: bool | None = None) -> Approver:
    """The terminal when there is one, else deny."""
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stderr.isatty()
    return TerminalApprover() if interactive else DenyAll()
