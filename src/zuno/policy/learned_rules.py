"""Rules learned from an approval: "always" widened from one call to a kind of call.

When the person answers "always" to a call, the terminal offers a rule a little
wider than the call itself, one they could have written in ``zuno.json``:

- a command (``shell``, ``exec_command``): its program and, when the next word
  reads as a subcommand, that word too (``git status --short`` gives the prefix
  ``git status``). An allow rule covers only one plain command, so a compound
  command (pipes, ``&&``) gets no rule;
- a file tool: the folder of the paths (``src/pkg/**``), or at the workspace's
  root the files of the same extension (``*.md``). Paths outside the workspace
  get no rule.

:func:`save_rule` adds the rule to a configuration file (the user's own), so
later sessions are allowed the same calls without asking. The hosts a command
asks to reach in ``proxy`` network mode are kept the same way, in
``sandbox.network_allow`` (:func:`save_network_hosts`).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any, cast

from zuno.config.loading import ConfigError
from zuno.config.permission import PermissionRule
from zuno.policy.shell_analysis import analyse

__all__ = ["command_prefix", "folder_glob", "save_network_hosts", "save_rule", "suggest_rule"]

_SUBCOMMAND = re.compile(r"[a-z][a-z0-9_:-]*\Z")
_COMMAND_TOOLS = frozenset({"shell", "exec_command"})


def command_prefix(command: str) -> str | None:
    """The prefix a rule for ``command`` names, or None when it is not one plain command."""
    words = analyse(command).plain
    if not words:
        return None
    program = words[0]
    if len(words) > 1 and _SUBCOMMAND.match(words[1]):
        return f"{program} {words[1]}"
    return program


def folder_glob(paths: Sequence[str]) -> str | None:
    """A path pattern covering ``paths`` (workspace-relative), or None.

    The deepest folder holding them all (``src/pkg/**``); at the root, the
    files of their one extension (``*.md``).
    """
    parts = [PurePosixPath(p) for p in paths]
    if not parts or any(p.is_absolute() or ".." in p.parts for p in parts):
        return None
    folders = [p.parent.parts for p in parts]
    common: list[str] = []
    for level in zip(*folders, strict=False):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    if common and common != ["."]:
        return "/".join(common) + "/**"
    suffixes = {p.suffix for p in parts}
    if len(suffixes) == 1 and (suffix := suffixes.pop()):
        return f"*{suffix}"
    return None


def suggest_rule(
    tool: str, arguments: dict[str, Any], paths: Sequence[str]
) -> PermissionRule | None:
    """The allow rule offered when the person answers "always" to this call, or None.

    Args:
        tool: The tool's name.
        arguments: The call's arguments.
        paths: The workspace-relative paths the call writes (empty for other tools).
    """
    if tool in _COMMAND_TOOLS:
        prefix = command_prefix(str(arguments.get("command", "")))
        return None if prefix is None else PermissionRule(tool=tool, pattern=prefix, action="allow")
    if paths:
        glob = folder_glob(paths)
        return None if glob is None else PermissionRule(tool=tool, pattern=glob, action="allow")
    return None


def save_rule(rule: PermissionRule, path: os.PathLike[str] | str) -> None:
    """Add ``rule`` to the ``permission.rules`` of the JSON configuration file at ``path``.

    The file is made when missing; its other keys are kept. It is replaced in one
    step (a new file renamed over it), so a reader never sees half of it.

    Raises:
        ConfigError: The file cannot be read as a JSON object, or written.
    """
    _append(path, "permission", "rules", [rule.model_dump()], "the rule")


def save_network_hosts(hosts: Sequence[str], path: os.PathLike[str] | str) -> None:
    """Add ``hosts`` to the ``sandbox.network_allow`` of the JSON configuration file at ``path``.

    What "always, and keep it" does for a command's ``network_hosts`` in ``proxy``
    network mode; kept like :func:`save_rule` (entries already there are not repeated).

    Raises:
        ConfigError: The file cannot be read as a JSON object, or written.
    """
    _append(path, "sandbox", "network_allow", list(hosts), "the hosts")


def _append(
    path: os.PathLike[str] | str, section: str, key: str, entries: list[Any], what: str
) -> None:
    """Append entries (those not there yet) to the list ``section.key`` of a JSON file."""
    target = os.fspath(path)
    failed = f"{target}: cannot add {what}"
    try:
        with open(target, encoding="utf-8") as f:
            data: Any = json.load(f)
    except FileNotFoundError:
        data = {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{failed}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{failed}: the top level is not a JSON object")
    config = cast(dict[str, Any], data)
    part = config.setdefault(section, {})
    if not isinstance(part, dict):
        raise ConfigError(f'{failed}: "{section}" is not an object')
    found = cast(dict[str, Any], part).setdefault(key, [])
    if not isinstance(found, list):
        raise ConfigError(f'{failed}: "{section}.{key}" is not a list')
    listed = cast(list[Any], found)
    for entry in entries:
        if entry not in listed:
            listed.append(entry)
    folder = os.path.dirname(target) or "."
    try:
        os.makedirs(folder, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=".zuno-", suffix=".json", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        os.replace(temporary, target)
    except OSError as exc:
        raise ConfigError(f"{failed}: {exc.strerror or exc}") from exc
