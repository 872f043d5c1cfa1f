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

import json
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from zuno.config.agents import TOOL_NAMES_SCHEMA, AgentSettings, CouncilSettings
from zuno.config.hooks import HookCommand, HookSettings
from zuno.config.lsp import LspSettings
from zuno.config.mcp import McpSettings
from zuno.config.models import ModelSettings
from zuno.config.narrowing import narrow
from zuno.config.paths import CONFIG_NAME, user_config_path
from zuno.config.permission import PermissionSettings
from zuno.config.problems import describe_problem
from zuno.config.providers import ProviderSettings
from zuno.config.sandbox import SandboxSettings
from zuno.config.trust import TrustError, TrustState, content_digest, trust_detail
from zuno.config.web import WebSettings
from zuno.core.tool_names import unknown_name_problem

__all__ = [
    "ConcurrencySettings",
    "Config",
    "ConfigError",
    "MemorySettings",
    "ReplaySettings",
    "ToolOutputSettings",
    "load_config",
    "user_config_path",
    "validate_config",
]


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


class Config(_Section):
    """The whole ``zuno.json``."""

    tools: dict[str, bool] = Field(
        default_factory=lambda: {},
        json_schema_extra={"propertyNames": TOOL_NAMES_SCHEMA},
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
        raise ConfigError(
            _sentence(source, [describe_problem(e, Config) for e in exc.errors()])
        ) from exc
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
