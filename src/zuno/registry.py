"""Which tools exist, where each belongs, and which are active for an agent.

Every tool the specification names has a fixed name and a place:

- the default surface (what a model sees unless an agent says otherwise),
- the durable work-state tools (plan, todo, goal),
- the conditional tools (``memory_propose`` when memory is enabled,
  ``council_run`` when the agent can reach a council),
- the registered slots (``edit``, ``execute``, ``lsp``): available only to an
  agent that names them or when the ``tools`` map switches them on,
- the opt-in tools beyond the specification (``undo``; the interactive-process
  tools ``exec_command``, ``write_stdin``, ``exec_poll``, ``exec_kill``): on
  only like the slots.

A name without an implementation in this build is simply absent: a call to it
is ``blocked: unavailable``. Availability (the ``tools`` map, allowlists) is
not authorization (``permission.rules``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from zuno.tool import Tool
from zuno.tool_names import (
    ALL_NAMES,
    CONDITIONAL,
    DEFAULT_SURFACE,
    DURABLE_STATE,
    OPT_IN,
    SLOTS,
    entry_matches,
    is_pattern,
)

if TYPE_CHECKING:
    from zuno.config import AgentSettings, Config

__all__ = [
    "ALL_NAMES",
    "CONDITIONAL",
    "DEFAULT_SURFACE",
    "DURABLE_STATE",
    "SLOTS",
    "NeedsSetup",
    "Place",
    "Registry",
    "Surface",
    "place_of",
    "switched",
]


@runtime_checkable
class NeedsSetup(Protocol):
    """A tool that cannot work until the configuration provides something (a backend).

    Such a tool is left off the surface, rather than offered to a model that
    could only watch it fail; the surface keeps the reason for people.
    """

    def unavailable_reason(self, config: Config) -> str | None:
        """Why the tool cannot work under ``config`` (what to set), or None when it can."""
        ...


class Place(StrEnum):
    """Where a tool name belongs."""

    DEFAULT = "default"
    DURABLE_STATE = "durable_state"
    CONDITIONAL = "conditional"
    SLOT = "slot"
    OPT_IN = "opt_in"
    """Zuno's own tools beyond the specification (``undo``): on only when switched on."""
    EXTENSION = "extension"


def place_of(name: str) -> Place:
    """The place of a tool name (anything not in the specification is an extension)."""
    if name in DEFAULT_SURFACE:
        return Place.DEFAULT
    if name in DURABLE_STATE:
        return Place.DURABLE_STATE
    if name in CONDITIONAL:
        return Place.CONDITIONAL
    if name in SLOTS:
        return Place.SLOT
    if name in OPT_IN:
        return Place.OPT_IN
    return Place.EXTENSION


@dataclass(frozen=True, slots=True)
class Surface:
    """The tools active for one agent, in a stable order."""

    tools: tuple[Tool[Any], ...]
    withheld: tuple[tuple[str, str], ...] = ()
    """Tools the agent would have but that cannot work yet: ``(name, what to set)``."""

    def get(self, name: str) -> Tool[Any] | None:
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]


def switched(switches: Mapping[str, bool], name: str) -> bool | None:
    """What the ``tools`` map says of ``name``: an exact key wins, then patterns (off wins).

    None when no key names it.
    """
    if name in switches:
        return switches[name]
    said = {
        on for entry, on in switches.items() if is_pattern(entry) and entry_matches(entry, name)
    }
    if not said:
        return None
    return False not in said


class Registry:
    """The implemented tools of this runtime, by name."""

    def __init__(self, tools: Iterable[Tool[Any]] = ()) -> None:
        self._tools: dict[str, Tool[Any]] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool[Any]) -> None:
        """Add a tool. Names are unique."""
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def surface(
        self,
        config: Config,
        agent: AgentSettings | None = None,
        *,
        conditions: dict[str, bool] | None = None,
    ) -> Surface:
        """The active surface: the agent's allowlist or the default one, then the switches.

        ``conditions`` says which conditional tools the situation allows
        (``{"memory_propose": True}``).
        """
        conditions = conditions or {}
        if agent is not None and agent.tools is not None:
            wanted = self._expand(agent.tools)
        else:
            wanted = [*DEFAULT_SURFACE, *DURABLE_STATE]
            wanted += [name for name in CONDITIONAL if conditions.get(name, False)]
            # The tools map can switch on a slot or an extension by name (or MCP pattern).
            wanted += self._expand(n for n, on in config.tools.items() if on)
            wanted += [n for n in self._tools if place_of(n) is Place.EXTENSION]
        active: list[Tool[Any]] = []
        withheld: list[tuple[str, str]] = []
        for name in dict.fromkeys(wanted):
            if switched(config.tools, name) is False:
                continue
            if place_of(name) is Place.CONDITIONAL and not conditions.get(name, False):
                continue
            tool = self._tools.get(name)
            if tool is None:
                continue
            reason = tool.unavailable_reason(config) if isinstance(tool, NeedsSetup) else None
            if reason is not None:
                withheld.append((name, reason))
                continue
            active.append(tool)
        return Surface(tuple(active), tuple(withheld))

    def _expand(self, entries: Iterable[str]) -> list[str]:
        """Names for configuration entries: a pattern becomes the registered tools it matches."""
        names: list[str] = []
        for entry in entries:
            if is_pattern(entry):
                names += [n for n in self._tools if entry_matches(entry, n)]
            else:
                names.append(entry)
        return names
