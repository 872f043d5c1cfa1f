"""Calls in plain words: how an approval prompt and the live view name a call and its result.

A person reads ``$ ls -la (in sub, timeout 30 s)``, ``write notes.md (2 lines)`` or
``patch one.txt (new), two.txt``, never the arguments as JSON; fields left at their
defaults (nested ones included) are not shown. A result keeps what matters: a patch's
file list, the user's answers, a command's status and last lines.

Plain strings only (no terminal library): the terminal side styles them, and
:func:`diff_style` says which style each diff line takes.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, cast

from pydantic import BaseModel

__all__ = [
    "count_lines",
    "describe_call",
    "diff_style",
    "file_diff",
    "for_person",
    "patch_files",
    "plural",
    "read_range",
    "result_lines",
    "snippet_diff",
    "without_defaults",
]

_VALUE_WIDTH = 60
_ONE_LINE_WIDTH = 160


def plural(count: int, noun: str) -> str:
    """``1 line``, ``2 lines``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def count_lines(text: str) -> int:
    """Lines of a text as an editor counts them (a last line without newline counts)."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _nested_models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's annotation holds (``list[Option]``, ``Option | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is None and not isinstance(annotation, types.UnionType):
        return []
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += _nested_models(arg)
    return found


def without_defaults(values: dict[str, Any], model: type[BaseModel] | None) -> dict[str, Any]:
    """The arguments less the fields left at their defaults, at every depth of ``model``.

    Without a model only absent values (None) are dropped: nothing else is known to be
    a default.
    """
    if model is None:
        return {k: v for k, v in values.items() if v is not None}
    fields = model.model_fields
    kept: dict[str, Any] = {}
    for key, value in values.items():
        field = fields.get(key)
        if field is not None and not field.is_required():
            default = field.get_default(call_default_factory=True)
            if value == default:
                continue
        nested = _nested_models(field.annotation) if field is not None else []
        if nested and isinstance(value, dict):
            value = without_defaults(cast(dict[str, Any], value), nested[0])
        elif nested and isinstance(value, list):
            value = [
                without_defaults(cast(dict[str, Any], item), nested[0])
                if isinstance(item, dict)
                else item
                for item in cast(list[Any], value)
            ]
        kept[key] = value
    return kept


def _value(value: Any) -> str:
    if isinstance(value, str) and value and not any(c in value for c in " \t\n\"'="):
        return _cut(value, _VALUE_WIDTH)
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _cut(text, _VALUE_WIDTH)


def _generic(tool: str, values: dict[str, Any]) -> str:
    pairs = " ".join(f"{k}={_value(v)}" for k, v in values.items())
    return f"{tool} {pairs}".rstrip()


def _command_details(values: dict[str, Any]) -> str:
    details: list[str] = []
    if values.get("workdir"):
        details.append(f"in {values['workdir']}")
    if values.get("timeout"):
        details.append(f"timeout {values['timeout']} s")
    if values.get("background"):
        details.append("in the background")
    return f" ({', '.join(details)})" if details else ""


def _command(values: dict[str, Any]) -> str:
    command = str(values.get("command", ""))
    lines = command.strip().splitlines() or [""]
    shown = lines[0] if len(lines) == 1 else f"{lines[0]} … ({plural(len(lines), 'line')})"
    return f"$ {shown}{_command_details(values)}"


def _execute(values: dict[str, Any]) -> str:
    argv = values.get("argv")
    words = [str(a) for a in cast(list[Any], argv)] if isinstance(argv, list) else []
    return f"$ {shlex.join(words)}{_command_details(values)}"


def patch_files(patch: str) -> list[str]:
    """The files a patch names: ``path (new)``, ``path (deleted)``, ``old -> new``, ``path``."""
    files: list[str] = []
    for line in patch.splitlines():
        for marker, note in (
            ("*** Add File: ", " (new)"),
            ("*** Delete File: ", " (deleted)"),
            ("*** Update File: ", ""),
        ):
            if line.startswith(marker):
                files.append(line[len(marker) :].strip() + note)
        if line.startswith("*** Move to: ") and files:
            files[-1] = f"{files[-1]} -> {line[len('*** Move to: ') :].strip()}"
    return files


def _patch(values: dict[str, Any]) -> str:
    files = patch_files(str(values.get("patch", "")))
    if not files:
        return "patch (no files named)"
    shown = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
    return f"patch {shown}"


def _write(values: dict[str, Any]) -> str:
    lines = count_lines(str(values.get("content", "")))
    return f"write {values.get('path')} ({plural(lines, 'line')})"


def _edit(values: dict[str, Any]) -> str:
    every = " (every occurrence)" if values.get("replace_all") else ""
    return f"edit {values.get('path')}{every}"


def _question(values: dict[str, Any]) -> str:
    asked = values.get("questions")
    items = cast(list[Any], asked) if isinstance(asked, list) else []
    texts = [
        f"{q.get('header')}: {q.get('question')}"
        for q in (cast(dict[str, Any], i) for i in items if isinstance(i, dict))
    ]
    return "question " + " | ".join(texts)


def _task(values: dict[str, Any]) -> str:
    what = values.get("description") or str(values.get("prompt", "")).strip().split("\n")[0]
    background = " (in the background)" if values.get("background") else ""
    return f"task for agent {values.get('agent')}: {what}{background}"


_DESCRIBERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "shell": _command,
    "execute": _execute,
    "write": _write,
    "edit": _edit,
    "apply_patch": _patch,
    "question": _question,
    "task": _task,
    "exec_command": _command,
    "write_stdin": lambda v: (
        f"type {_cut(json.dumps(v.get('chars', ''), ensure_ascii=False), _VALUE_WIDTH)}"
        f" into process {v.get('session')}"
    ),
    "exec_poll": lambda v: f"read new output of process {v.get('session')}",
    "exec_kill": lambda v: f"kill process {v.get('session')}",
    "webfetch": lambda v: f"fetch {v.get('url')}",
    "read": lambda v: f"read {v.get('path')}",
}


def describe_call(
    tool: str, arguments: dict[str, Any], model: type[BaseModel] | None = None
) -> str:
    """One line naming the call as a person would say it (at most 160 characters).

    Args:
        tool: The tool's name.
        arguments: The call's (normalized) arguments.
        model: The tool's argument model, to leave out the fields at their defaults
            in the generic form; None drops only absent (None) values.
    """
    describer = _DESCRIBERS.get(tool)
    if describer is not None:
        try:
            return _cut(describer(arguments), _ONE_LINE_WIDTH)
        except (TypeError, ValueError, AttributeError):
            pass  # arguments of an unexpected shape: the generic form still says something
    return _cut(_generic(tool, without_defaults(arguments, model)), _ONE_LINE_WIDTH)


def diff_style(line: str) -> str:
    """The terminal style of one unified-diff line (a rich style name; "" for context)."""
    if line.startswith(("+++", "---")):
        return "bold"
    if line.startswith("+"):
        return "green"
    if line.startswith("-"):
        return "red"
    if line.startswith("@@"):
        return "cyan"
    return ""


def snippet_diff(old: str, new: str) -> list[str]:
    """The lines an edit removes (``-``) and adds (``+``), with unchanged lines between."""
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=2)
    # The headers and hunk positions would count from the snippet, not the file: left out.
    return [line for line in lines if not line.startswith(("---", "+++", "@@"))]


def file_diff(path: str, old: str | None, new: str | None) -> list[str]:
    """A unified diff of one file's content before and after (None: the file is absent)."""
    return list(
        difflib.unified_diff(
            (old or "").splitlines(),
            (new or "").splitlines(),
            fromfile="/dev/null" if old is None else f"a/{path}",
            tofile="/dev/null" if new is None else f"b/{path}",
            lineterm="",
            n=2,
        )
    )


_MODEL_NOTE = re.compile(r"\n?\[Zuno: .*?\](?=\n|$)", re.DOTALL)
_MODEL_ADVICE = (" Do not retry it unchanged; ask the user or take another approach",)


def for_person(text: str) -> str:
    """``text`` without what Zuno wrote for the model only (``[Zuno: ...]`` notes, advice)."""
    text = _MODEL_NOTE.sub("", text)
    for advice in _MODEL_ADVICE:
        text = text.replace(advice, "")
    return text


_NUMBERED = re.compile(r"\s*(\d+)\t")
_OF_TOTAL = re.compile(r"\bof (\d+)\b")


def read_range(output: str) -> str:
    """The lines a ``read`` result shows, as ``lines 2-40 of 120`` ("" when not numbered)."""
    numbers = [int(m.group(1)) for m in map(_NUMBERED.match, output.splitlines()) if m]
    if not numbers:
        return ""
    first, last = numbers[0], numbers[-1]
    span = f"line {first}" if first == last else f"lines {first}-{last}"
    tail = output.rstrip().rsplit("\n", 1)[-1]
    total = _OF_TOTAL.search(tail) if not _NUMBERED.match(tail) else None
    if total:
        return f"{span} of {total.group(1)}"
    return f"{span} (the whole file)" if first == 1 else f"{span} (to the end)"


_EXEC_TOOLS = frozenset({"exec_command", "write_stdin", "exec_poll", "exec_kill"})


def _last_lines(lines: Sequence[str], count: int) -> list[str]:
    shown = [line for line in lines if line.strip()]
    return shown[-count:]


def result_lines(tool: str, output: str, limit: int = 12) -> list[str]:
    """What matters in a result, as lines: never more than ``limit``.

    A patch keeps its file list, a question its answers, a command its status and
    last lines of output; other results keep their first line.
    """
    lines = output.strip().splitlines()
    if not lines:
        return []
    if tool in ("apply_patch", "question", "todo_update", "todo_get"):
        kept = lines[:limit]
        if len(lines) > limit:
            kept.append(f"… {plural(len(lines) - limit, 'more line')}")
        return kept
    if tool in ("shell", "execute") and len(lines) > 1:
        return [lines[0], *_last_lines(lines[1:], min(3, limit - 1))]
    if tool in _EXEC_TOOLS and len(lines) > 1:
        # The process's status, then what it printed (the person sees what the model sees).
        return [lines[0], *_last_lines(lines[1:], min(8, limit - 1))]
    first = next((line for line in lines if line.strip()), "")
    return [first]
