"""The tool names a configuration may use, and how an entry names tools.

Every name the specification gives a tool has a place (the default surface,
the durable work-state tools, the conditional tools, the registered slots,
the opt-in interactive-process tools);
:mod:`zuno.dispatch.registry` decides what is active from these places. MCP tools are
named ``mcp__<server>__<tool>`` (:func:`zuno.integrations.mcp.remote.tool_name`), so a
configuration names them by the server it configures: an exact name, or a
pattern such as ``mcp__github__*`` for all of that server's tools.

A name that is none of these is a mistake that would otherwise fail open (a
misspelled switch that turns nothing off), so loading refuses it and suggests
the closest known name (:func:`unknown_name_problem`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterable
from fnmatch import fnmatchcase

__all__ = [
    "ALL_NAMES",
    "CONDITIONAL",
    "DEFAULT_SURFACE",
    "DURABLE_STATE",
    "INTERACTIVE",
    "MCP_NAME_PATTERN",
    "OPT_IN",
    "SLOTS",
    "entry_matches",
    "is_pattern",
    "unknown_name_problem",
]

DEFAULT_SURFACE = (
    "read",
    "glob",
    "grep",
    "write",
    "apply_patch",
    "shell",
    "bg",
    "task",
    "job",
    "webfetch",
    "web_search",
    "skill",
    "question",
)
DURABLE_STATE = ("plan_get", "plan_update", "todo_get", "todo_update", "goal_get", "goal_update")
CONDITIONAL = ("memory_propose", "council_run")
SLOTS = ("edit", "execute", "lsp")
INTERACTIVE = ("exec_command", "write_stdin", "exec_poll", "exec_kill")
"""The interactive-process tools (:mod:`zuno.tools.exec`), one of the opt-in groups."""
OPT_IN = ("undo", *INTERACTIVE)
"""Tools beyond the specification's surface: active only when an agent names them or the
``tools`` map switches them on (``undo`` is reached through ``zuno undo``)."""
ALL_NAMES = frozenset((*DEFAULT_SURFACE, *DURABLE_STATE, *CONDITIONAL, *SLOTS, *OPT_IN))

MCP_NAME_PATTERN = r"^mcp__[A-Za-z0-9_-]{1,40}__.+$"
"""What an entry naming MCP tools looks like (the server part is checked on loading)."""

_MCP = re.compile(r"mcp__(?P<server>[A-Za-z0-9_-]+?)__(?P<tool>.+)\Z")
_GLOB = frozenset("*?[")


def is_pattern(entry: str) -> bool:
    """Whether a configuration entry is a glob (``mcp__docs__*``) rather than one name."""
    return any(c in _GLOB for c in entry)


def entry_matches(entry: str, name: str) -> bool:
    """Whether a configuration entry (a name or a glob) names the tool ``name``."""
    return fnmatchcase(name, entry) if is_pattern(entry) else entry == name


def unknown_name_problem(
    entry: str, servers: Collection[str], extra: Collection[str] = ()
) -> str | None:
    """Why ``entry`` names no tool, with the closest known name; None when it is fine.

    Args:
        entry: A key of ``tools`` or an item of an agent's ``tools`` list.
        servers: The configured MCP servers' names (their tools are named
            ``mcp__<server>__...``, exactly or by a pattern).
        extra: Names of tools a program registers beside the built-in ones.
    """
    if entry in ALL_NAMES or entry in extra:
        return None
    mcp = _mcp_parts(entry, servers)
    if mcp is not None:
        server, tool = mcp
        if server in servers:
            return None
        near = _closest(server, servers)
        configured = ", ".join(repr(s) for s in sorted(servers)) or "none"
        hint = f"; did you mean {f'mcp__{near}__{tool}'!r}?" if near else ""
        return (
            f"{entry!r} names the MCP server {server!r}, which is not configured "
            f"(configured: {configured}){hint}"
        )
    if is_pattern(entry):
        return (
            f"{entry!r} is a pattern; patterns name only MCP tools, as mcp__<server>__* "
            "(other tools are named exactly)"
        )
    near = _closest(entry, [*ALL_NAMES, *extra, *(f"mcp__{s}__*" for s in servers)])
    hint = f"; did you mean {near!r}?" if near else "; `zuno config schema` lists the names"
    return f"{entry!r} names no tool{hint}"


def _mcp_parts(entry: str, servers: Iterable[str]) -> tuple[str, str] | None:
    """``(server, tool)`` of an ``mcp__<server>__<tool>`` entry.

    A server name may itself hold ``__``; a configured server that prefixes
    the entry is preferred to the shortest split.
    """
    if not entry.startswith("mcp__"):
        return None
    for server in sorted(servers, key=len, reverse=True):
        prefix = f"mcp__{server}__"
        if entry.startswith(prefix) and len(entry) > len(prefix):
            return server, entry[len(prefix) :]
    found = _MCP.match(entry)
    return (found["server"], found["tool"]) if found else None


def _closest(word: str, candidates: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.6)
    return found[0] if found else None
