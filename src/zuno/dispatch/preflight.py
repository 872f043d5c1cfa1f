"""Pre-flight: what a call must pass, in the model's order, before anything runs.

Resolve the name against the session's surface, parse and validate the
arguments, classify the call from its validated arguments, apply the session's
inspection rule, run the before hooks, and authorize (rules, then the
approver in strict mode: :mod:`zuno.dispatch.approval`). A call that fails
any of these is *blocked*: a ``dispatch.blocked`` event, then a finished row
with outcome ``blocked`` and its kind, and nothing of it ran.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from zuno.config.permission import PermissionSettings
from zuno.contract.calls import CallRequest, CallResult, blocked_text
from zuno.contract.events import Event
from zuno.contract.tool import Tool, read_only_refusal
from zuno.core.declarations import BlockKind, Effect, Outcome
from zuno.dispatch.admission import Admitted, Blocked
from zuno.dispatch.approval import ask_approver
from zuno.dispatch.arguments import (
    ArgumentsError,
    parse_arguments,
    raw_arguments,
    validation_message,
)
from zuno.durability.recovery import inspection_block
from zuno.durability.store.records import CallRecord
from zuno.durability.store.storable import storable
from zuno.durability.telemetry import call_span
from zuno.execution.sandbox.control_files import CONTROL_NAMES
from zuno.policy.hooks import (
    HookCall,
    HookDecision,
    Rewrite,
    failure_event,
    rewrite_note,
)
from zuno.policy.permissions import (
    Verdict,
    canonical_json,
    evaluate,
    fingerprint_of,
    plan_refusal,
)
from zuno.workspace.real_paths import TouchedPath, is_inside, real_path, touch

if TYPE_CHECKING:
    from zuno.dispatch.host import DispatchHost
    from zuno.dispatch.session_state import SessionState

__all__ = ["Preflight", "is_control_file"]


class Preflight:
    """Admits or blocks the calls of a step, one by one in the model's order."""

    def __init__(self, host: DispatchHost) -> None:
        self._host = host

    async def admit(
        self, session: SessionState, index: int, call_id: str, request: CallRequest
    ) -> Admitted:
        tool = session.surface.get(request.tool)
        if tool is None:
            raise Blocked(BlockKind.UNAVAILABLE, self._unavailable_message(session, request.tool))
        admitted = await self._checked(session, index, call_id, request, tool, request.arguments)
        self._check_mode(session, admitted)
        admitted = await self._before_hooks(session, admitted)
        try:
            await self._authorize(session, admitted)
            if admitted.hook_ask is not None and not admitted.asked:
                # A hook asked: the approver decides even what the rules would allow.
                await ask_approver(self._host, session, admitted, Verdict("ask", admitted.hook_ask))
        except Blocked as blocked:
            raise _judged_after(blocked, admitted.rewrites) from None
        return admitted

    async def _checked(
        self,
        session: SessionState,
        index: int,
        call_id: str,
        request: CallRequest,
        tool: Tool[Any],
        arguments: str | Mapping[str, Any] | None,
    ) -> Admitted:
        """Parse, validate and classify arguments; apply the read-only refusal and inspection rule.

        The model's arguments pass here first, and so does every rewrite of them
        by a before hook.
        """
        try:
            raw = parse_arguments(arguments)
        except ArgumentsError as exc:
            raise Blocked(BlockKind.INVALID_ARGUMENTS, str(exc)) from exc
        try:
            args = tool.args_model.model_validate(raw)
        except ValidationError as exc:
            raise Blocked(BlockKind.INVALID_ARGUMENTS, validation_message(tool, exc)) from exc
        try:
            declaration = tool.declare(args)
        except Exception as exc:  # a tool that cannot classify is treated as the strictest
            raise Blocked(
                BlockKind.INVALID_ARGUMENTS, f"these arguments cannot be classified: {exc}"
            ) from exc
        normalized = args.model_dump(mode="json", exclude_none=True)
        canonical = canonical_json(normalized)
        admitted = Admitted(
            index,
            call_id,
            request,
            tool,
            args,
            declaration,
            canonical,
            fingerprint_of(tool.name, canonical),
            normalized,
        )
        if tool.writes_files:
            refusal = read_only_refusal(self._host.config, "files")
            if refusal is not None:
                raise Blocked(BlockKind.DENIED, refusal, declaration)
        await self._check_session_rules(session, admitted)
        return admitted

    def _unavailable_message(self, session: SessionState, name: str) -> str:
        from zuno.dispatch.registry import ALL_NAMES

        available = ", ".join(session.surface.names) or "none"
        shown = storable(name)  # a lone surrogate in the name is shown escaped
        withheld = dict(session.surface.withheld)
        if name in ALL_NAMES and self._host.registry.get(name) is None:
            why = f"`{name}` is not available in this build of Zuno"
        elif name in withheld:
            why = f"`{name}` is not available: {withheld[name]}"
        elif self._host.registry.get(name) is not None:
            why = f"`{name}` is not enabled for this agent"
        else:
            why = f"there is no tool named `{shown}`"
        return f"{why}. Available tools: {available}"

    async def _check_session_rules(self, session: SessionState, call: Admitted) -> None:
        """Inspection before mutation: no side effect while a failure is uninspected."""
        reason = self.inspection_needed(session, call)
        if reason:
            raise Blocked(BlockKind.DENIED, reason, call.declaration)

    def inspection_needed(self, session: SessionState, call: Admitted) -> str | None:
        """Why this call must wait for an inspection, or None.

        Side-effecting calls wait, and so do delegating ones: a child agent
        could otherwise make the very changes its parent is held back from.
        """
        if call.declaration.effect not in (Effect.SIDE_EFFECTING, Effect.DELEGATING):
            return None
        if call.tool.checks_state_first:
            return None
        if not self._host.config.replay.require_inspection:
            return None
        return inspection_block(self._host.store, session.session_id)

    def _check_mode(self, session: SessionState, call: Admitted) -> None:
        """Plan mode refuses what it does not run before hooks or approvers see it.

        (:meth:`_authorize` checks again, for arguments a hook rewrote.)
        """
        if session.permissions.mode != "plan":
            return
        refusal = plan_refusal(call.tool.name, call.declaration)
        if refusal is not None:
            raise Blocked(BlockKind.DENIED, refusal, call.declaration)

    async def _before_hooks(self, session: SessionState, call: Admitted) -> Admitted:
        """Consult the before hooks in order, each once; returns the call as they left it.

        A rewrite is checked again (:meth:`_checked`) before the next hook sees it,
        and the permission rules judge the last one: a hook cannot lead a call
        around a deny rule. Each hook runs once, so rewrites are bounded.
        """
        host = self._host
        if not host.hooks:
            return call
        rewrites: list[Rewrite] = []
        asks: list[str] = []
        try:
            for hook in host.hooks.chain("before", call.tool.name):
                decision = await hook.consult(
                    HookCall(
                        "before",
                        session.session_id,
                        call.call_id,
                        call.tool.name,
                        call.normalized,
                        call.declaration.as_dict(),
                    )
                )
                if decision.failed:
                    host.events.emit(
                        failure_event(session.session_id, call.call_id, "before", decision)
                    )
                if not decision.allow:
                    host.events.emit(
                        Event(
                            "hook.denied",
                            session.session_id,
                            call.call_id,
                            {"phase": "before", "hook": hook.label, "reason": decision.reason},
                        )
                    )
                    raise Blocked(
                        BlockKind.DENIED,
                        f"a before hook refused this call: {decision.reason}",
                        call.declaration,
                    )
                if decision.ask:
                    asks.append(decision.reason or f"hook `{hook.label}` asked for it")
                if decision.arguments is None:
                    continue
                try:
                    changed = await self._checked(
                        session,
                        call.index,
                        call.call_id,
                        call.request,
                        call.tool,
                        decision.arguments,
                    )
                except Blocked:
                    rewrites.append(
                        self._rewrote(session, call, hook.label, decision, decision.arguments)
                    )
                    raise
                if changed.arguments_json == call.arguments_json:
                    continue  # the same call: nothing was rewritten
                rewrites.append(
                    self._rewrote(session, call, hook.label, decision, changed.normalized)
                )
                call = changed
        except Blocked as blocked:
            raise _judged_after(blocked, rewrites) from None
        call.rewrites = rewrites
        if asks:
            call.hook_ask = "a before hook asked for approval: " + "; ".join(asks)
        return call

    def _rewrote(
        self,
        session: SessionState,
        call: Admitted,
        hook: str,
        decision: HookDecision,
        after: dict[str, Any],
    ) -> Rewrite:
        """Record a hook's rewrite (``hook.rewrote``: the arguments before and after)."""
        rewrite = Rewrite(hook, decision.reason, call.normalized, after)
        self._host.events.emit(
            Event("hook.rewrote", session.session_id, call.call_id, rewrite.as_event_data())
        )
        return rewrite

    async def _authorize(self, session: SessionState, call: Admitted) -> None:
        host = self._host
        tool = call.tool
        call.mode = session.permissions.mode
        # Path tools are resolved whatever the rules: the guards below hold without any.
        touched = self._touched(call)
        for path in touched:
            if path.refusal is not None:
                raise Blocked(
                    BlockKind.DENIED,
                    f"{path.given!r} is never opened by a file tool: {path.refusal}",
                    call.declaration,
                )
        permissions = session.permissions
        if tool.rule_match == "path":
            subjects = [subject for path in touched for subject in path.subjects]
        elif permissions.rules:
            subjects = tool.rule_subjects(call.args, host.workspace)
        else:
            subjects = []  # no rules: nothing to match, no subject work
        strict_reason = None
        if permissions.mode != "permissive":
            strict_reason = self._outside_reads(
                session, permissions, call, touched
            ) or tool.strict_reason(call.args, host.config)
        verdict = evaluate(
            permissions,
            tool.name,
            call.declaration,
            subjects,
            tool.rule_match,
            strict_reason=strict_reason,
            edit_inside=self._edit_inside(call, touched),
        )
        if verdict.action == "deny":
            raise Blocked(
                BlockKind.DENIED,
                # No rule: the mode refused it (plan mode), and its reason says so.
                f"denied by {verdict.reason}; this call is not allowed in this workspace"
                if verdict.rule is not None
                else verdict.reason,
                call.declaration,
            )
        control = next((p for p in touched if p.writes and is_control_file(p)), None)
        own = next(
            (
                (p, label)
                for p in touched
                if p.writes
                and (label := host.control_paths.covers(p.real_abs, host.workspace)) is not None
            ),
            None,
        )
        if control is not None:
            # Neither an allow rule nor permissive mode skips this: a changed
            # zuno.json or git hook runs code outside the sandbox later.
            verdict = Verdict(
                "ask",
                f"it changes {control.real}, a control file (zuno.json, .zuno/, .git/) "
                "that is always asked about",
            )
        elif own is not None:
            # Zuno's own folders (the user's config, trust store, data folder) are
            # authority too, wherever they lie: the workspace may be $HOME.
            verdict = Verdict(
                "ask",
                f"it changes {own[0].real_abs}, in Zuno's own {own[1]}, which is always "
                "asked about",
            )
        elif (wants := tool.network_request(call.args, host.config)) is not None:
            # Hosts beyond the configured list widen the sandbox: a person decides.
            verdict = Verdict("ask", wants)
        if verdict.action == "allow":
            return
        await ask_approver(self._host, session, call, verdict)

    def _edit_inside(self, call: Admitted, touched: list[TouchedPath]) -> bool:
        """Whether the call is a file edit inside the workspace (accept-edits runs it unasked).

        A file tool that names its paths, all inside the workspace by their real
        location, none a control file (those are asked about in every mode).
        """
        return (
            call.tool.writes_files
            and call.declaration.effect is Effect.SIDE_EFFECTING
            and bool(touched)
            and all(p.inside and not self._guarded(p) for p in touched)
        )

    def _guarded(self, path: TouchedPath) -> bool:
        """Whether path is a workspace control file or in one of Zuno's own folders."""
        return (
            is_control_file(path)
            or self._host.control_paths.covers(path.real_abs, self._host.workspace) is not None
        )

    def _touched(self, call: Admitted) -> list[TouchedPath]:
        """The real locations of every path the call can reach."""
        raws = call.tool.touched_paths(call.args)
        if not raws:
            return []
        writes = call.declaration.effect is not Effect.READ_ONLY
        return [touch(raw, self._host.workspace, writes=writes) for raw in raws]

    def _outside_reads(
        self,
        session: SessionState,
        permissions: PermissionSettings,
        call: Admitted,
        touched: list[TouchedPath],
    ) -> str | None:
        """Why a read-only file call needs approval in strict mode: it reads outside.

        The session's own saved outputs are read without asking (a truncated
        result names its artifact); another session's are outside like
        anything else: they may hold another workspace's secrets.
        """
        if call.declaration.effect is not Effect.READ_ONLY or call.tool.workspace_only:
            return None
        outside = [p for p in touched if not p.inside]
        if not outside:
            return None
        own = self._host.store.artifacts_root / session.session_id
        roots = [str(own), *permissions.read_roots]
        readable = [real_path(_absolute(root, self._host.workspace))[0] for root in roots]
        for path in outside:
            if not any(is_inside(path.real_abs, root) for root in readable):
                return (
                    f"{call.tool.name} of {path.real_abs} reaches outside the workspace "
                    "(permission.read_roots lists folders read without asking)"
                )
        return None

    def block(
        self,
        session: SessionState,
        step: int,
        index: int,
        call_id: str,
        request: CallRequest,
        blocked: Blocked,
    ) -> CallResult:
        now = time.time()
        raw = (
            blocked.arguments if blocked.arguments is not None else raw_arguments(request.arguments)
        )
        decl = blocked.declaration
        text = blocked_text(blocked.kind, blocked.message, "Nothing was run.")
        record = CallRecord(
            call_id=call_id,
            session_id=session.session_id,
            step=step,
            index=index,
            attempt=1,
            tool=request.tool,
            arguments=raw,
            args_hash=hashlib.sha256(raw.encode("utf-8", "replace")).hexdigest(),
            effect=decl.effect.value if decl else None,
            replay=decl.replay.value if decl else None,
            concurrency=decl.concurrency.value if decl else None,
            status="finished",
            outcome=Outcome.BLOCKED.value,
            block_kind=blocked.kind.value,
            result=text,
            mode=session.permissions.mode,
            is_error=True,
            started_at=now,
            finished_at=now,
            model_call_id=request.model_call_id,
        )
        event = Event(
            "dispatch.blocked",
            session.session_id,
            call_id,
            {
                "index": index,
                "tool": request.tool,
                "block_kind": blocked.kind.value,
                "reason": blocked.message,
            },
            at=now,
        )
        self._host.store.record_blocked(record, event)
        self._host.events.deliver(event)
        call_span(record)
        return CallResult(
            call_id,
            session.session_id,
            index,
            request.tool,
            Outcome.BLOCKED,
            text,
            decl,
            blocked.kind,
            is_error=True,
            model_call_id=request.model_call_id,
            started_at=now,
            finished_at=now,
        )


def _judged_after(blocked: Blocked, rewrites: list[Rewrite]) -> Blocked:
    """A refusal of a call its hooks rewrote: it says so, and its row keeps what was judged."""
    if rewrites:
        blocked.message = rewrite_note(rewrites, ran=False) + blocked.message
        blocked.arguments = raw_arguments(rewrites[-1].after)
    return blocked


def is_control_file(path: TouchedPath) -> bool:
    """Whether a path is one of the workspace's control files, by name or real location.

    ``zuno.json`` at the workspace's top, anything in its ``.zuno/`` folder, and
    anything in a ``.git`` folder (or a ``.git`` file) at any depth: hooks and
    configuration there run commands outside the sandbox later.
    """
    for name in (path.real, path.lexical):
        if name.startswith("/") or name == ".":
            continue  # outside the workspace (write tools refuse it anyway)
        parts = name.split("/")
        if parts[0] in CONTROL_NAMES or ".git" in parts:
            return True
    return False


def _absolute(path: str, workspace: Path) -> str:
    """A configured folder as an absolute path (``~`` expanded; relative to the workspace)."""
    expanded = os.path.expanduser(path)
    return expanded if expanded.startswith("/") else str(workspace / expanded)
