"""The tool base: a name, an argument model, a declaration and ``run``.

A tool is small on purpose. Shared mechanics (truncation, ripgrep, sandboxing,
persistence) live in their own modules and are called from ``run``. Nothing
outside a tool's own tests calls ``run`` directly: every call goes through the
dispatcher (see :mod:`zuno.dispatch.dispatcher`).

Failures a tool can foresee are raised as exceptions the dispatcher maps to
stored outcomes::

    ToolError            -> outcome "error"   (it ran and failed; the message goes to the model)
      TransientError     -> outcome "error"   (a Safe call may be attempted again after backoff)
      ArgumentsRejected  -> outcome "blocked: invalid_arguments" (refused before any effect:
                            a patch whose context is not in the file, an unknown todo id)
        WritesNotAllowed -> outcome "blocked: denied" (``sandbox.mode`` is ``read-only``:
                            file tools may not write)
      ToolUnavailable    -> outcome "blocked: unavailable" (what the tool needs cannot be
                            reached and nothing was sent: an MCP server that is down)
    UncertainOutcome     -> outcome "uncertain" (the effect may have happened: timeout, lost reply)

Any other exception is an implementation failure, also stored as ``error``.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict

from zuno.contract.images import ImageAttachment
from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.core.declarations import BlockKind, Declaration
from zuno.workspace.beneath import Confined
from zuno.workspace.real_paths import touch

if TYPE_CHECKING:
    from zuno.config.loading import Config
    from zuno.config.permission import PermissionSettings

__all__ = [
    "ArgumentsRejected",
    "OutputTap",
    "PathOutsideWorkspace",
    "Tool",
    "ToolArgs",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolUnavailable",
    "TransientError",
    "UncertainOutcome",
    "WritesNotAllowed",
    "read_only_refusal",
]


class ToolArgs(BaseModel):
    """Base of every argument model: unknown fields are an error, not ignored."""

    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


A = TypeVar("A", bound=ToolArgs)


class ToolError(Exception):
    """The call ran and failed in a way the model should read and act on."""


class NotFound(ToolError):
    """What the call looked for does not exist: a failure that observed the real state.

    An inspection tool raising it has still inspected (the absence is what is
    there), so it counts for the inspection rule (see :mod:`zuno.durability.recovery`).
    """


class ArgumentsRejected(ToolError):
    """The arguments do not fit the current state; the tool refused before changing anything."""

    block_kind: ClassVar[BlockKind] = BlockKind.INVALID_ARGUMENTS
    """How the dispatcher stores the refusal (``blocked`` with this kind)."""


class WritesNotAllowed(ArgumentsRejected):
    """A file tool may not write at all in this sandbox mode (``read-only``); nothing ran.

    The dispatcher stores it as ``blocked: denied``: the configuration refused
    the call, whatever its arguments.
    """

    block_kind: ClassVar[BlockKind] = BlockKind.DENIED


def read_only_refusal(config: Any, what: str) -> str | None:
    """Why a file tool may not write ``what`` under this configuration, or None.

    ``sandbox.mode: read-only`` refuses every file write, whatever the path.
    """
    settings = getattr(config, "sandbox", None)
    if settings is None or settings.mode != "read-only":
        return None
    return (
        f"cannot write {what}: sandbox.mode is read-only, so file tools may not "
        "change files; ask the user to switch to workspace-write"
    )


class ToolUnavailable(ToolError):
    """What the tool needs cannot be reached, and nothing was sent: the call changed nothing."""

    block_kind: ClassVar[BlockKind] = BlockKind.UNAVAILABLE


class TransientError(ToolError):
    """A failure that may pass (timeout of an inspection, a busy provider)."""


class UncertainOutcome(Exception):
    """The call's effect may or may not have happened; it must never be re-run."""


class PathOutsideWorkspace(ArgumentsRejected):
    """A path that resolves outside the workspace where that is not allowed (nothing ran)."""


@dataclass(slots=True)
class ToolResult:
    """What a call produced.

    Attributes:
        output: The model-visible text. The dispatcher bounds it once more.
        data: Structured data for programs (``zuno call --json``, question answers).
        is_error: Whether the model should read this as a failure.
        uncertain: Whether the effect may or may not have happened (a timeout).
        artifact: Where the full output is kept, when it was truncated.
        reason: For a failed or uncertain call, why, in one line (recovery
            notices name it); None takes the first line of output.
        images: Images for the model beside the text (``read`` of a PNG); the
            stored row keeps only the text, each image's bytes are an artifact.
    """

    output: str
    data: dict[str, Any] | None = None
    is_error: bool = False
    uncertain: bool = False
    artifact: Path | None = None
    reason: str | None = None
    images: tuple[ImageAttachment, ...] = ()


OutputTap = Callable[[str, bytes], None]
"""Sees a running command's output: the stream's name and each chunk as it is read."""


@dataclass(slots=True)
class ToolContext:
    """What a running call may use. Built by the dispatcher for each execution."""

    workspace: Path
    session_id: str
    call_id: str
    attempt: int
    limits: OutputLimits
    artifacts: ArtifactStore
    config: Config
    services: Any = None
    """The runtime (for delegation, jobs and state tools); typed loosely to avoid a cycle."""
    extra: dict[str, Any] = field(default_factory=lambda: {})
    on_cancel: ToolResult | None = None
    """What the dispatcher stores if the call is cancelled while running, set by a tool
    that knows more than the default (the output a command printed so far; a question
    that changed nothing). Its ``uncertain`` flag decides ``uncertain`` over ``error``."""
    protected: tuple[Path, ...] = ()
    """Zuno's own folders (config, data, run folder: see :mod:`zuno.policy.control_paths`),
    which commands this call starts must not change wherever they lie."""
    output_tap: OutputTap | None = None
    """Who else sees a foreground command's output as it is read (``zuno call --stream``):
    called with the stream's name (``stdout``, ``stderr``) and each chunk, in the reading
    thread. The result and its artifacts are unchanged by it."""

    def resolve(self, path: str) -> Path:
        """A path argument made absolute (relative ones are taken from the workspace)."""
        p = Path(os.path.expanduser(path))
        if not p.is_absolute():
            p = self.workspace / p
        return Path(os.path.normpath(p))

    def resolve_inside(self, path: str) -> Path:
        """Like :meth:`resolve`, refusing a path whose real location leaves the workspace."""
        p = self.resolve(path)
        real = _real_path(p)
        root = _real_path(self.workspace)
        if real != root and root not in real.parents:
            raise PathOutsideWorkspace(
                f"{path!r} is outside the workspace {self.workspace}; "
                "use a path inside the workspace"
            )
        return p

    def ensure_writes_allowed(self, what: str) -> None:
        """Raise :class:`WritesNotAllowed` when ``sandbox.mode`` is ``read-only``.

        Args:
            what: What the call would write, for the message.
        """
        refusal = read_only_refusal(self.config, what)
        if refusal is not None:
            raise WritesNotAllowed(refusal)

    def resolve_writable(self, path: str) -> Confined:
        """Where a file tool may write ``path``: beneath the workspace or a writable root.

        The roots are the workspace and the existing folders of
        ``sandbox.writable_roots``, in every mode that writes (``full-access``
        lifts the sandbox from commands, not this limit from file tools).
        The returned root is the one the write must stay beneath when it opens
        the path (see :mod:`zuno.workspace.beneath`): the root that holds the path as
        written, else, for a name that leads into a root through a symlink,
        the root that holds its real location.

        Raises:
            WritesNotAllowed: ``sandbox.mode`` is ``read-only``.
            PathOutsideWorkspace: The path's real location is under no root.
        """
        self.ensure_writes_allowed(repr(path))
        settings = getattr(self.config, "sandbox", None)
        p = self.resolve(path)
        real = _settled_real_path(p, path)
        roots = [self.workspace]
        for raw in settings.writable_roots if settings is not None else ():
            extra = Path(os.path.expanduser(raw))
            extra = extra if extra.is_absolute() else self.workspace / extra
            if extra.is_dir():
                roots.append(Path(os.path.normpath(extra)))
        holding = [r for r in roots if _within(real, _real_path(r))]
        for root in roots:
            if root in holding and _within(p, root):
                return Confined(root, PurePosixPath(p.relative_to(root).as_posix()))
        if holding:
            root = _real_path(min(holding, key=lambda r: len(_real_path(r).parts)))
            return Confined(root, PurePosixPath(real.relative_to(root).as_posix()))
        configured = settings is not None and settings.writable_roots
        extra_note = " or an existing folder of sandbox.writable_roots" if configured else ""
        raise PathOutsideWorkspace(
            f"{path!r} is outside the workspace {self.workspace}; "
            f"use a path inside the workspace{extra_note}"
        )

    def artifact_path(self, name: str) -> Path:
        """Where this call may keep a full output called ``name``."""
        return self.artifacts.path_for(self.session_id, self.call_id, name)

    @property
    def permissions(self) -> PermissionSettings | None:
        """The session's permission settings (an agent's rules included), if known.

        Tools that reach paths the pre-flight could not name (a search's
        results, a file opened after a symlink swap) match them against these.
        """
        found: PermissionSettings | None = getattr(self.extra.get("session"), "permissions", None)
        # Tools' own tests build contexts without a configuration.
        config = cast("Config | None", self.config)
        return found if found is not None or config is None else config.permission


def _real_path(p: Path) -> Path:
    """The real path of p, following every symlink, dangling ones included."""
    return Path(os.path.realpath(p))


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _settled_real_path(p: Path, shown: str) -> Path:
    """The real path of p; refused when it keeps changing while it is looked at.

    :func:`os.path.realpath` fails (EINVAL) when a symlink on the path is
    replaced between its two looks at it: something is swapping the path.
    """
    for _ in range(3):
        try:
            return _real_path(p)
        except OSError:
            continue
    raise ArgumentsRejected(
        f"{shown!r} changes while it is being resolved (a symlink on it is being "
        "replaced); try again once nothing else is changing it"
    )


class Tool(ABC, Generic[A]):
    """Base of every tool.

    Subclasses set ``name``, ``description`` and ``args_model``; they declare
    their :class:`Declaration` (strict defaults otherwise) and may classify per
    invocation by overriding :meth:`declare`.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    args_model: type[A]
    declaration: ClassVar[Declaration] = Declaration()
    mixed: ClassVar[bool] = False
    """True when :meth:`declare` depends on the arguments (``bg``)."""
    rule_argument: ClassVar[str | None] = None
    """The main argument that ``permission.rules`` patterns match."""
    rule_match: ClassVar[Literal["path", "prefix", "glob"]] = "glob"
    checks_state_first: ClassVar[bool] = False
    """True for a side-effecting tool that itself compares the real state with what it
    expects before changing anything (``undo``): the inspection rule does not hold it
    back after a failure, since it is the repair."""
    changes_workspace: ClassVar[bool] = True
    """False for a side-effecting tool that cannot change workspace files (the plan,
    todo and goal updates change only the store): no checkpoint is taken before it."""
    writes_files: ClassVar[bool] = False
    """True for the file tools that change files (``write``, ``edit``, ``apply_patch``):
    ``sandbox.mode: read-only`` refuses them in pre-flight, before anyone is asked."""
    workspace_only: ClassVar[bool] = False
    """True when the tool itself refuses paths outside the workspace (``lsp``): strict
    mode then does not ask about a read outside, which would be refused anyway."""

    def declare(self, args: A) -> Declaration:
        """The declaration of one invocation, from its validated arguments."""
        return self.declaration

    def rule_subject(self, args: A, workspace: Path) -> str | None:
        """The string that permission rule patterns are matched against."""
        if self.rule_argument is None:
            return None
        value = getattr(args, self.rule_argument, None)
        if value is None:
            return None
        text = str(value)
        if self.rule_match == "path":
            p = Path(text)
            if p.is_absolute():
                try:
                    return p.relative_to(workspace).as_posix()
                except ValueError:
                    return p.as_posix()
            return Path(os.path.normpath(text)).as_posix()
        return text

    def touched_paths(self, args: A) -> list[str]:
        """Every path argument this call can reach, as given (empty: it takes no path).

        A path tool (``rule_match == "path"``) names its ``rule_argument``; tools
        reaching several paths (``apply_patch``) or a default one (``grep`` and
        ``glob`` search the workspace when no path is given) override this.
        The pre-flight resolves each to its real location (see
        :mod:`zuno.workspace.real_paths`) before rules and guards see it.
        """
        if self.rule_match != "path" or self.rule_argument is None:
            return []
        value = getattr(args, self.rule_argument, None)
        return [] if value is None else [str(value)]

    def rule_subjects(self, args: A, workspace: Path) -> list[str]:
        """Every string permission rule patterns are matched against.

        For a path tool: each touched path, by its real location and by the
        name used when that differs (a symlink, ``sub/..``), workspace-relative
        when inside. Otherwise the one :meth:`rule_subject`, if any. A deny or
        ask rule applies when it matches any subject; an allow must match all.
        """
        if self.rule_match == "path":
            return [
                subject
                for raw in self.touched_paths(args)
                for subject in touch(raw, workspace, writes=False).subjects
            ]
        subject = self.rule_subject(args, workspace)
        return [] if subject is None else [subject]

    def strict_reason(self, args: A, config: Config) -> str | None:
        """Why strict mode asks for this call although its effect alone would not.

        None by default; ``webfetch`` names a host not in ``web.allowed_domains``.
        (Reads outside the workspace are found by the pre-flight from
        :meth:`touched_paths`.) An allow rule covering the call lets it through.
        """
        return None

    def network_hosts(self, args: A, config: Config) -> tuple[str, ...]:
        """Hosts the call asks to reach beyond ``sandbox.network_allow`` (``proxy`` mode).

        None by default; ``shell`` names its ``network_hosts``. Only a person's
        approval grants them: a yes to this call only, "always" to the session or,
        saved, to ``sandbox.network_allow`` (see :mod:`zuno.execution.sandbox.egress.grants`).
        """
        return ()

    def network_request(self, args: A, config: Config) -> str | None:
        """Why this call is asked about in every mode: it asks for network hosts."""
        hosts = self.network_hosts(args, config)
        if not hosts:
            return None
        return (
            f"it asks to reach {', '.join(hosts)}, not in sandbox.network_allow "
            "(yes: for this call only)"
        )

    scope_approved_once: ClassVar[bool] = False
    """Whether any approval (a plain yes too) covers the call's :meth:`session_scope` for
    the rest of the session: one question per scope, not per call (``write_stdin``: per
    process)."""

    def session_scope(self, args: A) -> tuple[str, str] | None:
        """What "approve for the session" covers beyond this exact call, or None.

        Returns:
            A key naming the scope (approvals are stored under it) and the
            words an approval prompt shows ("fetches from docs.python.org").
        """
        return None

    def preview(self, args: A, workspace: Path | None = None) -> str:
        """What an approval prompt shows about this call (a diff for a patch)."""
        return args.model_dump_json(exclude_none=True)

    def startup_check(self) -> None:
        """Raise when something this tool needs is missing (rg, a sandbox).

        The runtime calls it once at startup, so a missing part is a clear
        startup error rather than a surprise at the first call.
        """

    @abstractmethod
    async def run(self, args: A, ctx: ToolContext) -> ToolResult:
        """Do the work. Only the dispatcher calls this."""

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments, as given to models."""
        return self.args_model.model_json_schema()
