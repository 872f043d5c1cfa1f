"""Asking the person at the terminal: the prompt that names a call, and one key per answer.

The prompt names the call in plain words and shows what it would change (a
coloured diff, the first lines of a new file, the command), then why it is
asked about when that says more than "it changes things". The keys: ``y`` yes
this once, ``n`` no, ``a`` always, ``t`` no and a line of text for the model,
``e`` (file edits in strict mode) yes and stop asking about edits.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

import anyio
import anyio.to_thread

from zuno.policy.approvals import (
    ApprovalAnswer,
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    DenyAll,
)

__all__ = ["TerminalApprover", "default_approver"]


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
        """Show the request and wait for one of its keys (one request at a time)."""
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
