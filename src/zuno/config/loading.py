"""The ``zuno.json`` configuration: its model, defaults, ranges and loading.

Two files are read: the user's (under the platform's config folder, or
``$ZUNO_CONFIG_HOME``) and the workspace's ``zuno.json``. When the user trusts
the workspace (:mod:`zuno.config.trust`), its file wins key by key (objects are
merged recursively, everything else replaced). Until then it can only narrow
what the user's file allows (:mod:`zuno.config.narrowing`); what it tried to widen is
listed in :attr:`Config.untrusted_ignored`. A bad file is a startup error that
names the file, the key, the value and what is allowed: :class:`ConfigError`.

Files fail closed: values are read strictly (``"yes"`` is not a boolean, ``"8"``
not a number), and every tool name in ``tools`` and in an agent's ``tools`` is
checked against the tools of this build and the configured MCP servers
(:mod:`zuno.core.tool_names`), with the closest name suggested.
"""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from zuno.config.lsp import LspSettings
from zuno.config.mcp import McpSettings
from zuno.config.models import ModelSettings
from zuno.config.narrowing import narrow
from zuno.config.paths import CONFIG_NAME, user_config_path
from zuno.config.providers import ProviderSettings
from zuno.config.sandbox import SandboxSettings
from zuno.config.trust import TrustError, TrustState, content_digest, trust_detail
from zuno.config.web import WebSettings
from zuno.core.tool_names import ALL_NAMES, MCP_NAME_PATTERN, unknown_name_problem

__all__ = [
    "AgentSettings",
    "ConcurrencySettings",
    "Config",
    "ConfigError",
    "CouncilSettings",
    "HookCommand",
    "HookSettings",
    "MemorySettings",
    "PermissionMode",
    "PermissionRule",
    "PermissionSettings",
    "ReplaySettings",
    "ToolOutputSettings",
    "load_config",
    "user_config_path",
    "validate_config",
]

_TOOL_NAMES_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"enum": sorted(ALL_NAMES)},
        {"pattern": MCP_NAME_PATTERN, "description": "mcp__<server>__<tool>, or mcp__<server>__*"},
    ]
}
"""What the schema says a tool name is (the server part is checked on loading)."""

ToolName = Annotated[str, Field(json_schema_extra=_TOOL_NAMES_SCHEMA)]
"""A tool name in an agent's list: a built-in name, or an MCP server's tools."""


class _Section(BaseModel):
    # strict: "yes" is not a boolean and "8" not a number; a file says what it means.
    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


class ConcurrencySettings(_Section):
    """Bounds on overlap, one per layer. 1 makes that layer serial."""

    tool_calls: int = Field(default=8, ge=1, le=64, description="Non-exclusive tool calls at once.")
    delegations: int = Field(default=8, ge=1, le=64, description="Child agents running at once.")
    mcp_connections: int = Field(default=8, ge=1, le=64, description="MCP requests in flight.")
    lsp_requests: int = Field(
        default=4, ge=1, le=64, description="Language-server requests in flight."
    )


class ToolOutputSettings(_Section):
    """How much of one call's output the model sees; the rest goes to an artifact."""

    max_bytes: int = Field(default=51200, ge=1024, le=10 * 1024 * 1024)
    max_lines: int = Field(default=2000, ge=10, le=100_000)
    artifact_max_bytes: int | None = Field(default=64 * 1024 * 1024, ge=1024 * 1024)
    """Largest full-output artifact kept per stream; past it the middle is dropped
    (with a marker) and the first and last halves kept. null keeps everything."""
    session_artifacts_max_bytes: int | None = Field(default=1024 * 1024 * 1024, ge=1024 * 1024)
    """Most the artifacts of one session may hold together (default 1 GiB); past it the
    oldest go first, and the result of the call that passed it names them. null: no cap."""
    image_max_bytes: int = Field(default=3_932_160, ge=0, le=20 * 1024 * 1024)
    """Largest image ``read`` sends to the model (default 3.75 MiB, whose base64 fits
    Anthropic's 5 MiB); bigger ones are described in words. 0 sends none."""


class PermissionRule(_Section):
    """One authorization rule.

    ``tool`` is a tool name or ``*``. ``pattern`` is matched against the tool's
    main argument: a glob on the workspace-relative path for file tools
    (``src/**``), a command prefix for ``shell`` (``git status``), a glob
    otherwise. ``*`` matches every call. Among the rules that match a call,
    deny beats ask beats allow.
    """

    tool: str = Field(min_length=1)
    pattern: str = "*"
    action: Literal["allow", "ask", "deny"]


PermissionMode = Literal["plan", "accept-edits", "strict", "permissive"]
"""How much a session may do without asking (see :mod:`zuno.policy.permissions`), strictest first.
"""


class PermissionSettings(_Section):
    """The permission mode and rules.

    ``plan`` runs only reads, questions and plan/todo/goal updates; ``accept-edits``
    lets file edits inside the workspace through without asking; ``strict`` (the
    default) asks for a fresh approval of every side-effecting or delegating call;
    ``permissive`` asks nothing. Deny rules deny in every mode.
    """

    mode: PermissionMode = "strict"
    rules: list[PermissionRule] = Field(default_factory=lambda: [])
    read_roots: list[str] = Field(default_factory=lambda: [])
    """Folders outside the workspace that read-only file tools (read, grep, glob,
    lsp) may read without asking in strict mode (``~`` is expanded)."""


class HookCommand(_Section):
    """A command run by a hook; it gets its payload as JSON on stdin.

    Before and after hooks answer on stdout with a JSON object such as
    ``{"decision": "allow" | "deny" | "ask", "arguments": {...}, "reason": "..."}``
    (after hooks: ``allow`` or ``deny``, and ``context``); empty output allows.
    Approval and session hooks only observe: their output is ignored.
    """

    command: str = Field(min_length=1)
    timeout: float = Field(default=10.0, gt=0, le=600)
    tools: list[str] | None = None
    """Only calls to these tools (all when omitted); not for session hooks."""
    fail: Literal["closed", "open"] = "closed"
    """What a before or after hook that errs, answers nonsense or times out does:
    ``closed`` denies (before: the call is blocked; after: its result is withheld),
    ``open`` is ignored. Either way a ``hook.failed`` event records it."""
    sandbox: bool = True
    """Run confined, like ``shell`` (no secrets in the environment). ``false`` opts
    out, and is honoured only in the user's own file."""
    network: bool = False
    """Whether the confined program may use the network."""

    _from_workspace: bool = PrivateAttr(default=False)

    @property
    def from_workspace(self) -> bool:
        """Whether this entry comes from the workspace's (trusted) ``zuno.json``."""
        return self._from_workspace

    def mark_from_workspace(self) -> None:
        """Record that this entry comes from the workspace's trusted ``zuno.json``."""
        self._from_workspace = True


_OBSERVERS = ("approval_asked", "approval_answered", "session_start", "session_end")


class HookSettings(_Section):
    """Hooks by the moment they run at (see :mod:`zuno.policy.hooks`)."""

    before: list[HookCommand] = Field(default_factory=lambda: [])
    """Before each call: may allow, deny, ask, or rewrite its arguments."""
    after: list[HookCommand] = Field(default_factory=lambda: [])
    """After each call: may withhold its result or add context for the model."""
    approval_asked: list[HookCommand] = Field(default_factory=lambda: [])
    """When a call is put to the approver (tool, arguments, reason)."""
    approval_answered: list[HookCommand] = Field(default_factory=lambda: [])
    """When the approver answered (the same, and the decision)."""
    session_start: list[HookCommand] = Field(default_factory=lambda: [])
    """When this process starts holding a session (created or resumed)."""
    session_end: list[HookCommand] = Field(default_factory=lambda: [])
    """When this process lets a session go."""

    @model_validator(mode="after")
    def _observers_only_observe(self) -> HookSettings:
        for phase in _OBSERVERS:
            for number, hook in enumerate(getattr(self, phase)):
                where = f"hooks.{phase}[{number}]"
                if "fail" in hook.model_fields_set:
                    raise ValueError(
                        f"{where}: `fail` applies to before and after hooks only; "
                        f"{phase} hooks observe, and their failures never stop anything"
                    )
                if hook.tools is not None and phase.startswith("session"):
                    raise ValueError(f"{where}: `tools` does not apply to session hooks")
        return self


class ReplaySettings(_Section):
    """Retries of Safe calls after transient failures (Never calls are never retried)."""

    attempts: int = Field(default=3, ge=1, le=10)
    base_delay: float = Field(default=0.2, ge=0, le=60)
    max_delay: float = Field(default=5.0, ge=0, le=600)
    require_inspection: bool = True
    """After a Never call fails or is uncertain, refuse side effects until a read-only call ran."""


class MemorySettings(_Section):
    """Memories proposed by agents and accepted by a person."""

    enabled: bool = False


class CouncilSettings(_Section):
    """A council: several members answer one question; ``council_run`` asks them."""

    members: list[str] = Field(min_length=2)
    """Agent names, or models as ``PROVIDER:MODEL``."""
    synthesizer: str | None = None
    """The agent or model that writes the synthesis (default: the asking agent's model)."""
    agents: list[str] = Field(default_factory=lambda: ["build"])
    """The agents that can reach the council."""


class AgentSettings(_Section):
    """A named agent: its model, prompt, exact tool allowlist and permission overrides."""

    description: str = ""
    model: str | None = None
    prompt: str | None = None
    tools: list[ToolName] | None = None
    """When set, exactly these tools: it replaces the default surface."""
    permission: PermissionSettings | None = None
    max_steps: int | None = Field(default=None, ge=1, le=1000)


class Config(_Section):
    """The whole ``zuno.json``."""

    tools: dict[str, bool] = Field(
        default_factory=lambda: {},
        json_schema_extra={"propertyNames": _TOOL_NAMES_SCHEMA},
        description="Switch tools on (slots, extensions) or off, by name or MCP pattern.",
    )
    concurrency: ConcurrencySettings = Field(default_factory=lambda: ConcurrencySettings())
    tool_output: ToolOutputSettings = Field(default_factory=lambda: ToolOutputSettings())
    permission: PermissionSettings = Field(default_factory=lambda: PermissionSettings())
    agents: dict[str, AgentSettings] = Field(default_factory=lambda: {})
    hooks: HookSettings = Field(default_factory=lambda: HookSettings())
    replay: ReplaySettings = Field(default_factory=lambda: ReplaySettings())
    model: str | None = None
    """The default model, as ``PROVIDER:MODEL`` (``openai:gpt-4o``)."""
    memory: MemorySettings = Field(default_factory=lambda: MemorySettings())
    council: CouncilSettings | None = None
    sandbox: SandboxSettings = Field(default_factory=lambda: SandboxSettings())
    providers: dict[str, ProviderSettings] = Field(default_factory=lambda: {})
    models: dict[str, ModelSettings] = Field(default_factory=lambda: {})
    """Per-model settings by ``PROVIDER:MODEL``: the price (see :mod:`zuno.policy.budget`)."""
    web: WebSettings = Field(default_factory=lambda: WebSettings())
    mcp: McpSettings = Field(default_factory=lambda: McpSettings())
    """MCP servers whose tools join the registry (see :mod:`zuno.config.mcp`)."""
    lsp: LspSettings = Field(default_factory=lambda: LspSettings())
    """Language servers of the ``lsp`` tool, by file extension (see :mod:`zuno.config.lsp`)."""
    sources: list[str] = Field(default_factory=lambda: [], exclude=True)
    """The files this configuration was read from (not a key of the file)."""

    # Set by load_config, never read from a file.
    _workspace_trust: TrustState = PrivateAttr(default=TrustState.NO_FILE)
    _workspace_digest: str | None = PrivateAttr(default=None)
    _untrusted_ignored: list[str] = PrivateAttr(default_factory=lambda: [])
    _trust_changed: str | None = PrivateAttr(default=None)

    @property
    def workspace_trust(self) -> TrustState:
        """The trust state of the workspace file this configuration was read with."""
        return self._workspace_trust

    @property
    def workspace_digest(self) -> str | None:
        """The SHA-256 of the workspace file's content as it was read (None: no file)."""
        return self._workspace_digest

    @property
    def trust_changed(self) -> str | None:
        """For a ``changed`` workspace: the file that changed (``zuno.json`` or one it runs)."""
        return self._trust_changed

    @property
    def untrusted_ignored(self) -> list[str]:
        """The keys of an untrusted workspace file that were ignored because they widen."""
        return list(self._untrusted_ignored)

    def untrusted_warning(self) -> str | None:
        """One line naming what an untrusted workspace file tried to widen, or None."""
        if not self._untrusted_ignored:
            return None
        changed = (
            f" ({self._trust_changed or 'it'} changed since it was trusted)"
            if self._workspace_trust == "changed"
            else ""
        )
        return (
            f"the workspace zuno.json is not trusted{changed}; ignored: "
            f"{', '.join(self._untrusted_ignored)} (run `zuno trust` to honour them)"
        )


class ConfigError(Exception):
    """A configuration file that cannot be used, with what to fix."""


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from exc


def _parse(path: Path, content: bytes) -> dict[str, Any]:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a JSON object, got {type(data).__name__}")
    return data  # type: ignore[return-value]


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out[key] = _merge(old, value)  # type: ignore[arg-type]
        else:
            out[key] = value
    return out


def _describe(error: Any) -> str:
    loc = ".".join(str(p) for p in error["loc"]) or "(top level)"
    value = json.dumps(error.get("input"), default=str)
    if len(value) > 80:
        value = value[:77] + "..."
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"unknown key {loc!r}; {_did_you_mean(error['loc'])}"
    if kind == "missing":
        return f"key {loc!r} is required"
    ctx: dict[str, Any] = error.get("ctx") or {}
    expected: object = ctx.get("expected")
    if kind in ("literal_error", "enum") and isinstance(expected, str):
        # JSON strings, as they are written in the file.
        choices = re.sub(r"'([^']*)'", r'"\1"', expected)
        return f"key {loc!r} has value {value}: it must be {choices}"
    allowed = _allowed_range(error["loc"])
    return f"key {loc!r} has value {value}: {error['msg']}{allowed}"


def _did_you_mean(loc: tuple[Any, ...]) -> str:
    """The fix for an unknown key: the closest known key of its section, when one is close."""
    section = _section_at(loc[:-1])
    name = loc[-1] if loc else None
    if section is None or not isinstance(name, str):
        return "remove it or check its spelling"
    known = [n for n, f in section.model_fields.items() if not f.exclude]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f"did you mean {'.'.join([*map(str, loc[:-1]), close[0]])!r}?"
    return f"remove it, or use one of: {', '.join(sorted(known))}"


def _section_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The settings model that holds the keys found at ``loc`` (None: not a model)."""
    annotation: Any = Config
    for part in loc:
        annotation = _unwrapped(annotation)
        fields = getattr(annotation, "model_fields", None)
        if fields is not None:
            if not isinstance(part, str) or part not in fields:
                return None
            annotation = fields[part].annotation
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]  # ``part`` is a key of the map
        else:
            return None
    annotation = _unwrapped(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _unwrapped(annotation: Any) -> Any:
    """``X`` of ``X | None``; anything else as it is."""
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            return inner[0]
    return annotation


def _allowed_range(loc: tuple[Any, ...]) -> str:
    """The declared bounds of the field at ``loc``, as `` (allowed: 1..=64)``."""
    model: Any = Config
    field = None
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if not isinstance(part, str) or fields is None or part not in fields:
            return ""
        field = fields[part]
        model = field.annotation
    if field is None:
        return ""
    low = high = None
    for meta in field.metadata:
        low = getattr(meta, "ge", low)
        high = getattr(meta, "le", high)
    if low is None and high is None:
        return ""
    return f" (allowed: {low if low is not None else ''}..={high if high is not None else ''})"


def validate_config(
    data: dict[str, Any],
    source: str,
    *,
    servers: Collection[str] = (),
    tool_names: Collection[str] = (),
) -> Config:
    """Validate a configuration read from JSON, naming ``source`` in errors.

    Values are read strictly, as JSON (an enum from its string, never a
    boolean from ``"yes"``), and every tool name must be known.

    Args:
        data: The parsed file (or files, merged).
        source: The file(s) named in errors.
        servers: MCP servers configured elsewhere (the other file) whose tools
            may be named here, beside the servers ``data`` configures.
        tool_names: Names of tools a program registers beside the built-in ones.
    """
    try:
        config = Config.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        raise ConfigError(_sentence(source, [_describe(e) for e in exc.errors()])) from exc
    unknown = tool_name_problems(config, {*servers, *config.mcp.servers}, tool_names)
    if unknown:
        raise ConfigError(_sentence(source, unknown))
    return config


def _sentence(source: str, problems: list[str]) -> str:
    # A full stop ends the message, so a quoted value at its end is never mistaken
    # for quotes around the whole message (and stripped with them).
    text = f"{source}: {'; '.join(problems)}"
    return text if text.endswith((".", "?", ")")) else text + "."


def tool_name_problems(
    config: Config, servers: Collection[str], tool_names: Collection[str] = ()
) -> list[str]:
    """What is wrong with the tool names of ``tools`` and of each agent's ``tools`` list."""
    problems: list[str] = []
    for name in config.tools:
        problem = unknown_name_problem(name, servers, tool_names)
        if problem:
            problems.append(f"key {f'tools.{name}'!r}: {problem}")
    for agent, settings in config.agents.items():
        for name in settings.tools or ():
            problem = unknown_name_problem(name, servers, tool_names)
            if problem:
                problems.append(f"key {f'agents.{agent}.tools'!r}: {problem}")
    return problems


def _server_names(*files: dict[str, Any]) -> set[str]:
    """The MCP servers the raw files configure (before either is validated)."""
    names: set[str] = set()
    for data in files:
        mcp: object = data.get("mcp")
        servers: object = (
            cast(dict[str, object], mcp).get("servers") if isinstance(mcp, dict) else None
        )
        if isinstance(servers, dict):
            names.update(str(k) for k in cast(dict[str, object], servers))
    return names


def load_config(
    workspace: Path,
    *,
    user_file: Path | None = None,
    trusted: bool | None = None,
    tool_names: Iterable[str] = (),
) -> Config:
    """Read the user file and the workspace file.

    Args:
        workspace: The workspace folder; its ``zuno.json`` is read when present.
        user_file: The user's file (default: :func:`user_config_path`).
        trusted: Whether the workspace file is trusted; None asks the trust
            records (:func:`zuno.config.trust.is_trusted`). A trusted file wins key by
            key; an untrusted one may only narrow (:func:`zuno.config.narrowing.narrow`).
        tool_names: Names of tools a program registers beside the built-in
            ones, so the files may name them.
    """
    user_path = user_file or user_config_path()
    ws_path = workspace / CONFIG_NAME
    extra = frozenset(tool_names)
    user_data: dict[str, Any] = {}
    found: list[str] = []
    ws_content: bytes | None = None
    ws_data: dict[str, Any] = {}
    if user_path.is_file():
        user_data = _parse(user_path, _read_bytes(user_path))
        found.append(str(user_path))
    if ws_path.is_file() and not _same_file(ws_path, user_path):
        # One read: the bytes hashed for the trust check are the bytes parsed.
        ws_content = _read_bytes(ws_path)
        ws_data = _parse(ws_path, ws_content)
    # Either file may name the tools of a server the other configures.
    servers = _server_names(user_data, ws_data)
    if found:
        # Validate each file alone first so an error names the file it is in.
        validate_config(user_data, str(user_path), servers=servers, tool_names=extra)
    state, digest, ignored, changed = TrustState.NO_FILE, None, [], None
    merged = user_data
    if ws_content is not None:
        ws_config = validate_config(ws_data, str(ws_path), servers=servers, tool_names=extra)
        digest = content_digest(ws_content)
        state, changed = _trust_state(workspace, ws_content, trusted)
        if state == TrustState.TRUSTED:
            merged = _merge(user_data, ws_data)
        else:
            user_config = validate_config(
                user_data, str(user_path), servers=servers, tool_names=extra
            )
            merged, ignored = narrow(_dump(user_config), ws_data, _dump(ws_config))
        found.append(str(ws_path))
    config = validate_config(
        merged, " + ".join(found) or "defaults", servers=servers, tool_names=extra
    )
    config.sources = found
    config._workspace_trust = state  # pyright: ignore[reportPrivateUsage]
    config._workspace_digest = digest  # pyright: ignore[reportPrivateUsage]
    config._untrusted_ignored = ignored  # pyright: ignore[reportPrivateUsage]
    config._trust_changed = changed  # pyright: ignore[reportPrivateUsage]
    if state == TrustState.TRUSTED:
        _mark_workspace_entries(config, ws_data)
    return config


def _mark_workspace_entries(config: Config, ws_data: dict[str, Any]) -> None:
    """Mark the hooks and servers the trusted workspace file set (they start in the workspace)."""
    hooks: Any = ws_data.get("hooks")
    if isinstance(hooks, dict):
        for phase in cast(dict[str, Any], hooks):
            for hook in getattr(config.hooks, str(phase), []):
                cast(HookCommand, hook).mark_from_workspace()
    for section, found in (("mcp", config.mcp.servers), ("lsp", config.lsp.servers)):
        block: Any = ws_data.get(section)
        servers: Any = (
            cast(dict[str, Any], block).get("servers") if isinstance(block, dict) else None
        )
        if isinstance(servers, dict):
            for name in cast(dict[str, Any], servers):
                entry = found.get(str(name).lower() if section == "lsp" else str(name))
                if entry is not None:
                    entry.mark_from_workspace()


def _trust_state(
    workspace: Path, content: bytes, trusted: bool | None
) -> tuple[TrustState, str | None]:
    if trusted is not None:
        return (TrustState.TRUSTED if trusted else TrustState.UNTRUSTED), None
    try:
        return trust_detail(workspace, content)
    except TrustError as exc:
        raise ConfigError(str(exc)) from exc


def _same_file(a: Path, b: Path) -> bool:
    """Whether the workspace file is the user's own (Zuno run in the config folder)."""
    try:
        return b.is_file() and a.samefile(b)
    except OSError:
        return False


def _dump(config: Config) -> dict[str, Any]:
    return config.model_dump(mode="json", exclude={"sources"})


def config_schema() -> dict[str, Any]:
    """The JSON Schema of ``zuno.json``."""
    schema = Config.model_json_schema()
    schema.get("properties", {}).pop("sources", None)
    schema["title"] = "zuno.json"
    return schema
