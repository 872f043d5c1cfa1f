"""The terminal approver of ``zuno run`` and ``zuno chat``: "always" that learns a rule.

Answering ``a`` to a command or a file edit offers two scopes: this exact call
for the rest of the session, or a rule one step wider (a command prefix, a
folder glob; see :mod:`zuno.policy.learned_rules`) saved to the user's ``zuno.json``.
The offer says how many of the calls already made in this folder (any session
in the store) the rule would have allowed, so the person sees how wide it is
before saying yes. A chosen rule holds for the rest of the session at once.

A command asking to reach hosts beyond ``sandbox.network_allow`` (``proxy``
network mode) gets its own offer: the hosts for every command of this session,
or added to ``sandbox.network_allow`` in the user's ``zuno.json`` (and held for
this session at once).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from zuno.config.loading import ConfigError, user_config_path
from zuno.config.permission import PermissionRule
from zuno.policy.approvals import ApprovalAnswer, ApprovalDecision, ApprovalRequest
from zuno.policy.learned_rules import save_network_hosts, save_rule, suggest_rule
from zuno.policy.permissions import rule_matches
from zuno.policy.terminal_approver import Segments, TerminalApprover

if TYPE_CHECKING:
    from zuno.session.runtime import Runtime

__all__ = ["LearningApprover", "past_matches"]

_COMMAND_TOOLS = ("shell", "exec_command")


class LearningApprover(TerminalApprover):
    """A :class:`TerminalApprover` whose "always" offers a rule to keep.

    The runtime is attached once it exists (:meth:`attach`): before that, and for
    calls no rule generalises, "always" covers what the request covers.
    """

    def __init__(self, ask: Callable[[str], str] | None = None) -> None:
        """Ask at the terminal, or through ``ask`` (see :class:`TerminalApprover`)."""
        super().__init__(ask)
        self._rt: Runtime | None = None

    def attach(self, runtime: Runtime) -> None:
        """Use ``runtime``'s tools, store and workspace for the offers."""
        self._rt = runtime

    async def always(self, request: ApprovalRequest) -> ApprovalDecision | ApprovalAnswer:
        if request.network_hosts:
            return await self._hosts(request.network_hosts)
        rt = self._rt
        rule = None if rt is None else _offered_rule(rt, request)
        if rt is None or rule is None:
            return ApprovalDecision.APPROVE_SESSION
        matched, total = past_matches(rt, rule)
        target = user_config_path()
        history = (
            f"it would have allowed {matched} of the {total} {_tools_of(rule)} calls made in "
            "this folder"
            if total
            else f"no {_tools_of(rule)} calls were made in this folder before"
        )
        prompt: Segments = [
            ("  always allow:\n", "bold"),
            ("    [s] this exact call, for the rest of this session\n", ""),
            (f"    [r] {_rule_words(rule)}, from now on (saved to {target}); ", ""),
            (f"{history}\n", "dim"),
            ("  choose s or r (Esc: no): ", "bold"),
        ]
        choice = await self.key(prompt, "sr")
        if choice == "s":
            return ApprovalDecision.APPROVE_SESSION
        if choice != "r":
            return ApprovalDecision.DENY
        try:
            save_rule(rule, target)
        except ConfigError as exc:
            await self._say(f"  not saved: {exc}; the rule holds for this session only\n")
        else:
            await self._say(f"  saved to {target}\n")
        return ApprovalAnswer(ApprovalDecision.APPROVE_SESSION, rule=rule)

    async def _hosts(self, hosts: tuple[str, ...]) -> ApprovalDecision:
        """ "Always" for hosts a command asks to reach: the session, or saved for good."""
        target = user_config_path()
        named = ", ".join(hosts)
        prompt: Segments = [
            ("  always allow:\n", "bold"),
            (f"    [s] reaching {named}, for every command of this session\n", ""),
            (f"    [r] reaching {named} from now on (added to sandbox.network_allow in ", ""),
            (f"{target})\n", ""),
            ("  choose s or r (Esc: no): ", "bold"),
        ]
        choice = await self.key(prompt, "sr")
        if choice not in ("s", "r"):
            return ApprovalDecision.DENY
        if choice == "r":
            try:
                save_network_hosts(hosts, target)
            except ConfigError as exc:
                await self._say(f"  not saved: {exc}; the hosts hold for this session only\n")
            else:
                await self._say(f"  saved to {target}\n")
        return ApprovalDecision.APPROVE_SESSION  # the session has them now, saved or not

    async def _say(self, text: str) -> None:
        import sys

        sys.stderr.write(text)
        sys.stderr.flush()


def _offered_rule(rt: Runtime, request: ApprovalRequest) -> PermissionRule | None:
    """The rule "always" offers for this call (None: only the exact call)."""
    if request.covers != "this exact call":
        return None  # the tool names its own wider scope (a host, a process)
    return suggest_rule(
        request.tool, request.arguments, _written_paths(rt, request.tool, request.arguments)
    )


def _written_paths(rt: Runtime, tool_name: str, arguments: dict[str, Any]) -> list[str]:
    """The workspace-relative paths a file tool writes ([] for other tools, or outside)."""
    tool = rt.registry.get(tool_name)
    if tool is None or not tool.writes_files:
        return []
    try:
        args = tool.args_model.model_validate(arguments)
        raws = tool.touched_paths(args)
    except Exception:  # arguments that do not validate generalise to nothing
        return []
    paths: list[str] = []
    for raw in raws:
        target = (rt.workspace / raw).resolve()
        if not target.is_relative_to(rt.workspace):
            return []
        paths.append(target.relative_to(rt.workspace).as_posix())
    return paths


def _tools_of(rule: PermissionRule) -> str:
    return "command" if rule.tool in _COMMAND_TOOLS else rule.tool


def _rule_words(rule: PermissionRule) -> str:
    if rule.tool in _COMMAND_TOOLS:
        return f'commands starting "{rule.pattern}" ({rule.tool})'
    return f"{rule.tool} of {rule.pattern}"


def past_matches(rt: Runtime, rule: PermissionRule) -> tuple[int, int]:
    """(calls the rule matches, calls of its tools) among this folder's stored calls."""
    tools = _COMMAND_TOOLS if rule.tool in _COMMAND_TOOLS else (rule.tool,)
    marks = ", ".join("?" for _ in tools)
    rows = rt.store.query(
        "SELECT c.tool, c.arguments FROM calls c JOIN sessions s ON s.session_id = c.session_id"
        f" WHERE s.workspace = ? AND c.attempt = 1 AND c.tool IN ({marks})",
        (str(rt.workspace), *tools),
    )
    matched = 0
    for tool_name, raw in rows:
        try:
            arguments: Any = json.loads(str(raw))
        except ValueError:
            continue
        if not isinstance(arguments, dict):
            continue
        values = cast(dict[str, Any], arguments)
        if rule.tool in _COMMAND_TOOLS:
            hit = rule_matches(rule, str(tool_name), str(values.get("command", "")), "prefix")
        else:
            paths = _written_paths(rt, str(tool_name), values)
            hit = bool(paths) and all(rule_matches(rule, str(tool_name), p, "path") for p in paths)
        matched += hit
    return matched, len(rows)
