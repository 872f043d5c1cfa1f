"""The runtime: configuration, store, registry, approver and hooks in one place.

Programs embedding Zuno build a :class:`Runtime`, open a session and dispatch
model steps::

    runtime = Runtime(Path("."), approver=CallbackApprover(ask_user))
    session = runtime.open_session(agent="build")
    results = await runtime.dispatch(session, [CallRequest("read", {"path": "README.md"})])

Opening and releasing sessions is :mod:`zuno.session.lifecycle`'s; the runtime
turns an opened session into the :class:`~zuno.dispatch.session_state.SessionState`
the dispatcher sees. Without ``tools`` it has the built-in tools
(:mod:`zuno.session.builtin_tools`), each imported on first use.
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from zuno.config.agents import AgentSettings
from zuno.config.loading import Config, ConfigError, load_config
from zuno.config.permission import PermissionMode
from zuno.config.trust import TrustError, TrustState, pinned_files
from zuno.contract.events import Event, EventBus
from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import OutputTap, Tool
from zuno.dispatch.dispatcher import CallRequest, CallResult, Dispatcher
from zuno.dispatch.registry import Registry, Surface
from zuno.dispatch.scheduling import SessionBarrier
from zuno.dispatch.session_state import SessionState
from zuno.durability import fencing
from zuno.durability.store import Store, open_store
from zuno.durability.workers import this_worker
from zuno.policy.approvals import Approver
from zuno.policy.control_paths import control_paths
from zuno.policy.hooks import Hooks, PythonHook
from zuno.policy.modes import check_mode, remember_mode
from zuno.policy.permissions import effective_permissions
from zuno.policy.terminal_approver import default_approver
from zuno.session.jobs import JobLane
from zuno.session.lifecycle import SessionLifecycle

if TYPE_CHECKING:
    from zuno.integrations.mcp.errors import McpServerError
    from zuno.policy.budget import Budget
    from zuno.session.questions import Questioner

__all__ = ["BUILTIN_AGENTS", "Runtime", "UnknownAgent"]

BUILTIN_AGENTS: dict[str, AgentSettings] = {
    "build": AgentSettings(description="The default agent: the whole default surface."),
    "explore": AgentSettings(
        description="Read-only exploration: reads and searches, no changes.",
        tools=[
            "read",
            "glob",
            "grep",
            "skill",
            "job",
            "webfetch",
            "web_search",
            "plan_get",
            "todo_get",
            "goal_get",
        ],
    ),
}


_log = logging.getLogger("zuno.session.runtime")


class UnknownAgent(LookupError):
    """No agent has that name."""


class Runtime:
    """Everything a dispatch needs, built once per process."""

    mcp_failures: dict[str, McpServerError] = {}  # never mutated: entering sets a fresh dict
    """The configured MCP servers that could not start, by name, and why (set on entering)."""

    def __init__(
        self,
        workspace: Path,
        *,
        config: Config | None = None,
        store: Store | None = None,
        db_path: Path | None = None,
        approver: Approver | None = None,
        tools: Iterable[Tool[Any]] | None = None,
        before_hooks: Sequence[PythonHook] = (),
        after_hooks: Sequence[PythonHook] = (),
    ) -> None:
        self.workspace = workspace.resolve()
        if not self.workspace.is_dir():
            raise ConfigError(f"the workspace {workspace} is not a folder")
        self.config = config if config is not None else load_config(self.workspace)
        self.store = store if store is not None else open_store(db_path)
        self.artifacts = ArtifactStore(self.store.artifacts_root)
        self.control_paths = control_paths(self.store, _trusted_scripts(self))
        """Zuno's own folders, found once here (see :mod:`zuno.policy.control_paths`)."""
        self.output_limits = OutputLimits(
            self.config.tool_output.max_bytes, self.config.tool_output.max_lines
        )
        self.approver: Approver = approver if approver is not None else default_approver()
        self._connect_mcp = tools is None
        if tools is None:
            # Each built-in tool is imported and checked when first described or called.
            from zuno.session.builtin_tools import lazy_builtin_tools

            self.registry = Registry(lazy_builtin_tools(self.config))
        else:
            self.registry = Registry(tools)
        for tool in self.registry.instances():  # a lazy tool is checked when loaded
            tool.startup_check()
        self.hooks = Hooks(
            self.config.hooks,
            self.workspace,
            list(before_hooks),
            list(after_hooks),
            sandbox=self.config.sandbox,
            protected=self.control_paths.named,
        )
        self.events = EventBus(self.store)
        self.dispatcher = Dispatcher(self)
        self.delegations = anyio.CapacityLimiter(self.config.concurrency.delegations)
        """Bounds the child agents (task, council members) running at once."""
        self.jobs = JobLane(
            self.store,
            self.store.artifacts_root / "jobs",
            self.config.tool_output.artifact_max_bytes,
        )
        self.output_tap: OutputTap | None = None
        """Sees the output of the foreground commands this runtime runs as it is read
        (``zuno call --stream``); None: no one but the call's result and artifacts."""
        self.questioner: Questioner | None = None
        """Who answers the question tool (a terminal, a program); None: no one."""
        self.budget: Budget | None = None
        """The spending cap of the agents run on this runtime (``--max-budget``); None: none."""
        self.identity = this_worker().id
        """This worker (``w1:...``, see :mod:`zuno.durability.workers`), written on every call row
        it runs.
        """
        self.lifecycle = SessionLifecycle(
            self.store,
            self.jobs,
            self.hooks,
            self.events,
            identity=self.identity,
            workspace=self.workspace,
        )
        """Opens and releases this runtime's sessions (see :mod:`zuno.session.lifecycle`)."""
        self._sessions: weakref.WeakSet[SessionState] = weakref.WeakSet()
        self._barriers: weakref.WeakValueDictionary[str, SessionBarrier] = (
            weakref.WeakValueDictionary()
        )
        """One barrier per session id, however many states were opened for it."""
        self._stack: AsyncExitStack | None = None

    # Agents and surfaces ------------------------------------------------------

    def agent_names(self) -> list[str]:
        return list(dict.fromkeys([*BUILTIN_AGENTS, *self.config.agents]))

    def agent_settings(self, name: str) -> AgentSettings:
        """The named agent (configured ones override built-ins of the same name)."""
        if name in self.config.agents:
            return self.config.agents[name]
        if name in BUILTIN_AGENTS:
            return BUILTIN_AGENTS[name]
        raise UnknownAgent(
            f"no agent named {name!r}; known agents: {', '.join(self.agent_names())}"
        )

    def conditions(self, agent_name: str) -> dict[str, bool]:
        """Which conditional tools this situation allows."""
        council = self.config.council
        return {
            "memory_propose": self.config.memory.enabled,
            "council_run": council is not None and agent_name in council.agents,
        }

    def _surface_for(self, agent: str, narrowed: frozenset[str] | None) -> Surface:
        surface = self.surface(agent)
        if narrowed is None:
            return surface
        return surface.narrowed(narrowed)

    def add_tools(self, tools: Iterable[Tool[Any]]) -> None:
        """Register more tools (an MCP server's); open sessions see them at once."""
        for tool in tools:
            tool.startup_check()
            self.registry.register(tool)
        for state in list(self._sessions):
            state.surface = self._surface_for(state.agent_name, state.narrowed_to)

    def surface(self, agent: str = "build") -> Surface:
        """The tools active for the named agent."""
        settings = self.agent_settings(agent)
        return self.registry.surface(self.config, settings, conditions=self.conditions(agent))

    # Sessions -------------------------------------------------------------------

    def open_session(
        self,
        session_id: str | None = None,
        *,
        agent: str = "build",
        parent_call_id: str | None = None,
        model: str | None = None,
        title: str | None = None,
        tools: Sequence[str] | None = None,
        depth: int = 0,
        wait: float = 0.0,
        mode: PermissionMode | None = None,
    ) -> SessionState:
        """Resume a stored session, or create a new one when no id is given.

        ``mode`` chooses the session's permission mode (``plan``, ``accept-edits``,
        ``strict``, ``permissive``) and stores it with the session; without it a
        resumed session keeps the mode stored with it, else the configuration's
        (see :mod:`zuno.policy.modes`).

        ``tools`` narrows the agent's surface (a delegation can only shrink it).
        The session is leased to this worker until :meth:`close` (other runtimes
        of this process share it). ``wait``: seconds to keep trying while another
        live worker holds it (its lease may end or be released meanwhile).
        What opening does, step by step, is in :mod:`zuno.session.lifecycle`.

        Raises:
            UnknownSession: No session has that id (or the prefix is ambiguous).
            SessionBusy: Another live worker holds the session.
        """
        opened = self.lifecycle.open(
            session_id,
            agent=agent,
            check_agent=self.agent_settings,
            parent_call_id=parent_call_id,
            model=model,
            title=title,
            depth=depth,
            wait=wait,
            mode=mode,
        )
        record = opened.record
        settings = self.agent_settings(record.agent)
        narrowed = frozenset(tools) if tools is not None else None
        permissions = effective_permissions(self.config.permission, settings)
        if opened.mode is not None and opened.mode != permissions.mode:
            permissions = permissions.model_copy(update={"mode": opened.mode})
        state = SessionState(
            record.session_id,
            record.agent,
            settings,
            self._surface_for(record.agent, narrowed),
            permissions,
            depth,
            narrowed,
            self._barriers.setdefault(record.session_id, SessionBarrier()),
        )
        self._sessions.add(state)
        return state

    def set_mode(
        self, session: SessionState, mode: PermissionMode, *, remember: bool = True
    ) -> None:
        """Switch the session's permission mode from its next call on.

        ``remember``: store it with the session, so that a resume keeps it (False:
        for this runtime's state only, as ``zuno call --mode`` does). Each call's
        row records the mode it was admitted in.

        Raises:
            ValueError: ``mode`` is not a permission mode.
        """
        chosen = check_mode(mode)
        was = session.permissions.mode
        if remember:
            remember_mode(self.store, session.session_id, chosen)
        session.permissions = session.permissions.model_copy(update={"mode": chosen})
        if chosen != was:
            self.events.emit(
                Event("session.mode", session.session_id, data={"mode": chosen, "was": was})
            )

    async def dispatch(
        self, session: SessionState, requests: Sequence[CallRequest]
    ) -> list[CallResult]:
        """Dispatch one model step (see :class:`zuno.dispatch.dispatcher.Dispatcher`).

        Raises:
            Exception: A tool named in the step cannot start (its startup check:
                rg or the sandbox missing), as it would have when the runtime was built.
        """
        self.load_tools(r.tool for r in requests)
        lease = self.lifecycle.lease
        # The commands started here are this lease's: fenced when it lapses, not another's.
        with fencing.holding(lease.fence_holder if lease is not None else None):
            return await self.dispatcher.dispatch(session, requests)

    def load_tools(self, names: Iterable[object]) -> None:
        """Import and start the named built-in tools now, before anything runs.

        Tools load on first use; a tool that cannot start (no rg, no sandbox)
        then fails here, as a startup error, not as a call's outcome.
        Unknown names are left to the dispatcher (``blocked: unavailable``).
        """
        for name in names:
            if isinstance(name, str):
                self.registry.get(name)

    async def call(
        self, session: SessionState, tool: str, arguments: dict[str, Any] | str | None = None
    ) -> CallResult:
        """Dispatch a single call as its own step."""
        (result,) = await self.dispatch(session, [CallRequest(tool, arguments)])
        return result

    async def __aenter__(self) -> Runtime:
        """Start the background lane and connect the configured MCP servers.

        MCP servers are connected here only for a runtime that uses the
        built-in tools (``tools`` not given); a program that passes its own
        tools connects its servers itself (see :mod:`zuno.integrations.mcp`).
        """
        stack = AsyncExitStack()
        try:
            await stack.__aenter__()
            # Servers first. One that cannot start is left out with one warning line:
            # its tools are unavailable, the built-in tools and other servers are not.
            self.mcp_failures = {}
            if self._connect_mcp and self.config.mcp.servers:
                from zuno.integrations.mcp.client import connect_mcp_servers

                servers = await stack.enter_async_context(
                    connect_mcp_servers(
                        self.config,
                        self.workspace,
                        skip_failed=True,
                        protected=self.control_paths.named,
                    )
                )
                self.add_tools(servers.tools())
                for name, error in servers.failures.items():
                    self.mcp_failures[name] = error
                    _log.warning(
                        "zuno: %s; its tools are unavailable this run "
                        '(fix mcp.servers.%s in zuno.json, or set its "enabled" to false)',
                        error.summary,
                        name,
                    )
            await stack.enter_async_context(self.jobs)
            from zuno.execution.process_table import processes_for

            # Interactive processes live while the runtime runs; leaving kills them.
            stack.enter_context(processes_for(self))
        except BaseException as exc:
            try:
                await stack.__aexit__(*sys.exc_info())
            finally:
                _raise_mcp_error_from(exc)
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Disconnect MCP servers, cancel the jobs still running and stop the lane."""
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    def release(self, state: str = "idle") -> None:
        """Release this runtime's sessions (as ``state``) and its share of the lease.

        The store stays open: a fleet worker's runtimes share its store (:mod:`zuno.fleet.worker`).
        """
        self.lifecycle.release(state)

    def close(self) -> None:
        """Release this runtime's sessions (``idle``), end its lease and close the store."""
        try:
            self.release()
        finally:
            self.dispatcher.close()
            self.store.close()


def _raise_mcp_error_from(exc: BaseException) -> None:
    """Raise the MCP server error inside a task group's exception group, if there is one.

    A server that fails inside the SDK's task group arrives wrapped; the person
    needs the one error that says which server failed and why.
    """
    from zuno.integrations.mcp.errors import McpServerError

    if not isinstance(exc, BaseExceptionGroup):
        return
    found = exc.subgroup(McpServerError)
    if found is None:
        return
    leaf: BaseException = found
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]  # pyright: ignore[reportUnknownMemberType]
    raise leaf from exc


def _trusted_scripts(rt: Runtime) -> list[Path]:
    """The workspace files a trusted workspace ``zuno.json`` runs (pinned by ``zuno trust``)."""
    if rt.config.workspace_trust != TrustState.TRUSTED:
        return []
    try:
        return pinned_files(rt.workspace)
    except TrustError:
        return []  # the configuration was trusted from the same records a moment ago
