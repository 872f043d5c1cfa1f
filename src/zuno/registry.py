"""Which tools exist, where each belongs, and which are active for an agent.

Every tool the specification names has a fixed name and a place:

- the default surface (what a model sees unless an agent says otherwise),
- the durable work-state tools (plan, todo, goal),
- the conditional tools (``memory_propose`` when memory is enabled,
  ``council_run`` when the agent can reach a council),
- the registered slots (``edit``, ``execute``, ``lsp``): available only to an
  agent that names them or when the ``tools`` map switches them on.

A name without an implementation in this build is simply absent: a call to it
is ``blocked: unavailable``. Availability (the ``tools`` map, allowlists) is
not authorization (``permission.rules``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from zuno.config import AgentSettings, Config
from zuno.tool import Tool

__all__ = [
    "ALL_NAMES",
    "CONDITIONAL",
    "DEFAULT_SURFACE",
    "DURABLE_STATE",
    "SLOTS",
    "Place",
    "Registry",
    "Surface",
    "place_of",
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
ALL_NAMES = frozenset((*DEFAULT_SURFACE, *DURABLE_STATE, *CONDITIONAL, *SLOTS))


class Place(StrEnum):
    """Where a tool name belongs."""

    DEFAULT = "default"
    DURABLE_STATE = "durable_state"
    CONDITIONAL = "conditional"
    SLOT = "slot"
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
    return Place.EXTENSION


@dataclass(frozen=True, slots=True)
class Surface:
    """The tools active for one agent, in a stable order."""

    tools: tuple[Tool[Any], ...]

    def get(self, name: str) -> Tool[Any] | None:
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]


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
            wanted = list(dict.fromkeys(agent.tools))
        else:
            wanted = [*DEFAULT_SURFACE, *DURABLE_STATE]
            wanted += [name for name in CONDITIONAL if conditions.get(name, False)]
            # The tools map can switch on a slot or an extension by name.
            wanted += [n for n, on in config.tools.items() if on and n not in wanted]
            wanted += [n for n in self._tools if place_of(n) is Place.EXTENSION and n not in wanted]
        active: list[Tool[Any]] = []
        for name in wanted:
            if config.tools.get(name) is False:
                continue
            if place_of(name) is Place.CONDITIONAL and not conditions.get(name, False):
                continue
            tool = self._tools.get(name)
            if tool is not None:
                active.append(tool)
        return Surface(tuple(active))
