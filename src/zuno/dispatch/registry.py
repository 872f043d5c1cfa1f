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

import functools
import importlib
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from zuno.contract.tool import Tool
from zuno.core.tool_names import (
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
    from zuno.config.agents import AgentSettings
    from zuno.config.loading import Config

__all__ = [
    "ALL_NAMES",
    "CONDITIONAL",
    "DEFAULT_SURFACE",
    "DURABLE_STATE",
    "SLOTS",
    "LazyTool",
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


@functools.cache
def _needs_setup(kind: type) -> bool:
    """Whether tools of class ``kind`` are :class:`NeedsSetup` (asked once per class).

    A protocol's ``isinstance`` inspects the object's attributes on every call:
    a few milliseconds for each surface (each session a fleet worker runs).
    """
    return issubclass(kind, NeedsSetup)


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


class LazyTool:
    """A tool known by name whose module is imported the first time it is needed.

    ``zuno call read`` should not pay for importing and checking twenty other
    tools. The handle holds the tool's name and a function that builds it
    (importing its module, see :data:`zuno.session.builtin_tools.BUILTINS`): :meth:`describe`
    builds it once, :meth:`load` also runs its
    :meth:`~zuno.contract.tool.Tool.startup_check` once; a registry and every surface
    made from it share the one instance.
    """

    __slots__ = ("_build", "_checked", "_tool", "name", "needs_setup")

    def __init__(self, name: str, build: Callable[[], Tool[Any]], *, needs_setup: bool) -> None:
        self.name = name
        self.needs_setup = needs_setup
        """Whether the tool may implement :class:`NeedsSetup` (the surface loads it to ask)."""
        self._build = build
        self._tool: Tool[Any] | None = None
        self._checked = False

    @property
    def loaded(self) -> bool:
        """Whether the tool's module was imported and the tool built."""
        return self._tool is not None

    def describe(self) -> Tool[Any]:
        """The tool, imported and built but not started: to show its declaration, not to run it.

        Raises:
            ValueError: The factory made a tool of another name.
        """
        if self._tool is None:
            tool = self._build()
            if tool.name != self.name:
                raise ValueError(f"the tool registered as {self.name!r} is named {tool.name!r}")
            self._tool = tool
        return self._tool

    def load(self) -> Tool[Any]:
        """The tool, imported, built and checked (:meth:`~zuno.contract.tool.Tool.startup_check`)
        once.

        Raises:
            ValueError: The factory made a tool of another name.
            Exception: Whatever the tool's startup check raises (rg or the sandbox missing).
        """
        tool = self.describe()
        if not self._checked:
            tool.startup_check()
            self._checked = True
        return tool


def import_factory(home: str) -> Callable[..., Any]:
    """The object ``"package.module:name"`` names, importing its module."""
    module, _, attribute = home.partition(":")
    return getattr(importlib.import_module(module), attribute)  # type: ignore[no-any-return]


def _loaded(member: Tool[Any] | LazyTool) -> Tool[Any]:
    return member.load() if isinstance(member, LazyTool) else member


class Surface:
    """The tools active for one agent, in a stable order.

    Built-in tools stay :class:`LazyTool` handles until a caller needs the tool
    itself (:meth:`get`, :attr:`tools`); :attr:`names` imports nothing.
    """

    __slots__ = ("_members", "withheld")

    def __init__(
        self,
        tools: Iterable[Tool[Any] | LazyTool] = (),
        withheld: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self._members: tuple[Tool[Any] | LazyTool, ...] = tuple(tools)
        self.withheld = withheld
        """Tools the agent would have but that cannot work yet: ``(name, what to set)``."""

    @property
    def tools(self) -> tuple[Tool[Any], ...]:
        """Every active tool, ready to run (imports and checks the ones not loaded yet)."""
        return tuple(_loaded(m) for m in self._members)

    def described(self) -> tuple[Tool[Any], ...]:
        """Every active tool, to show what it declares (``zuno tools``).

        Unlike :attr:`tools`, nothing is started: listing needs neither rg nor a
        sandbox (``zuno doctor`` checks those).
        """
        return tuple(m.describe() if isinstance(m, LazyTool) else m for m in self._members)

    def get(self, name: str) -> Tool[Any] | None:
        for member in self._members:
            if member.name == name:
                return _loaded(member)
        return None

    @property
    def names(self) -> list[str]:
        return [m.name for m in self._members]

    def narrowed(self, names: Iterable[str]) -> Surface:
        """This surface keeping only ``names`` (nothing is loaded)."""
        keep = frozenset(names)
        return Surface(tuple(m for m in self._members if m.name in keep))

    def __repr__(self) -> str:
        return f"Surface({self.names!r}, withheld={self.withheld!r})"


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

    def __init__(self, tools: Iterable[Tool[Any] | LazyTool] = ()) -> None:
        self._tools: dict[str, Tool[Any] | LazyTool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool[Any] | LazyTool) -> None:
        """Add a tool, or a handle that loads it when first needed. Names are unique."""
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool[Any] | None:
        """The tool of that name (imported and checked now if it was not yet), or None."""
        member = self._tools.get(name)
        return None if member is None else _loaded(member)

    def instances(self) -> list[Tool[Any]]:
        """The tools registered as built instances (not as :class:`LazyTool` handles)."""
        return [m for m in self._tools.values() if not isinstance(m, LazyTool)]

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
        active: list[Tool[Any] | LazyTool] = []
        withheld: list[tuple[str, str]] = []
        for name in dict.fromkeys(wanted):
            if switched(config.tools, name) is False:
                continue
            if place_of(name) is Place.CONDITIONAL and not conditions.get(name, False):
                continue
            tool = self._tools.get(name)
            if tool is None:
                continue
            # Only a tool that may need setting up is loaded here to be asked.
            asked = tool.describe() if isinstance(tool, LazyTool) and tool.needs_setup else tool
            setup = cast(NeedsSetup, asked) if _needs_setup(type(asked)) else None
            reason = setup.unavailable_reason(config) if setup is not None else None
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
