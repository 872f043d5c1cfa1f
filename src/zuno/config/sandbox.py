"""The ``sandbox`` section of the configuration.

The lead embeds :class:`SandboxSettings` in the configuration as
``config.sandbox``; tools read it with
``getattr(ctx.config, "sandbox", None) or SandboxSettings()`` so that a context
built without a configuration still gets the strict defaults.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["DEFAULT_ENV_REMOVE", "SandboxKind", "SandboxMode", "SandboxSettings"]

SandboxKind = Literal["auto", "bubblewrap", "landlock", "none"]
"""Which sandbox runs commands. ``auto`` prefers bubblewrap, then Landlock; never none."""

SandboxMode = Literal["read-only", "workspace-write", "full-access"]
"""What a sandboxed command may write."""

DEFAULT_ENV_REMOVE: tuple[str, ...] = (
    "*_TOKEN",
    "*_KEY",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*_CREDENTIALS",
    "*_COOKIE",
    "*_AUTH",
    "*_AUTHTOKEN",
)
"""Glob patterns of environment variables withheld from commands by default.

Values shaped like a credential are withheld too, whatever their name (see
:mod:`zuno.execution.sandbox.environment`)."""


class SandboxSettings(BaseModel):
    """How commands run: which sandbox, what they may write, how long they may take.

    Attributes:
        kind: The sandbox. ``auto`` picks bubblewrap, else Landlock, and is a
            startup error when neither works; ``none`` must be asked for by name.
        mode: ``read-only`` (nothing persistent is writable), ``workspace-write``
            (the workspace, a private temporary folder and ``writable_roots``)
            or ``full-access`` (no sandbox at all; explicit configuration only).
        network: Whether sandboxed commands may use the network: ``false`` (a
            closed network namespace), ``true`` (the host's network), or
            ``"proxy"``: a closed namespace whose only way out is Zuno's proxy,
            which lets through the hosts of ``network_allow`` and records every
            connection (see :mod:`zuno.execution.sandbox.egress`).
        network_allow: In ``proxy`` mode, the hosts commands may reach: names,
            ``*.suffix``, addresses or networks, presets (``@pypi``), each with
            an optional ``:PORT``.
        network_deny: Hosts refused in ``proxy`` mode even when allowed (deny wins).
        writable_roots: Extra folders writable in ``workspace-write`` mode.
        timeout_default: Seconds a command may run when the call names no timeout.
        timeout_max: The largest timeout a call may ask for, in seconds.
        job_timeout_default: Seconds a background job may run when its call names
            no timeout; past it the job and everything it started are killed.
        env_remove: Glob patterns (matched case-insensitively) of environment
            variables that commands do not receive. The built-in patterns
            (:data:`DEFAULT_ENV_REMOVE`) always apply; a configured list adds to them.
        env_keep: Exact names of variables that commands receive even though a
            pattern of ``env_remove`` matches them or their value looks like a
            credential (a secret passed on purpose).
    """

    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: SandboxKind = "auto"
    mode: SandboxMode = "workspace-write"
    network: bool | Literal["proxy"] = False
    network_allow: tuple[str, ...] = ()
    network_deny: tuple[str, ...] = ()
    writable_roots: tuple[str, ...] = ()
    timeout_default: int = Field(default=120, ge=1)
    timeout_max: int = Field(default=600, ge=1)
    job_timeout_default: int = Field(default=3600, ge=1)
    env_remove: tuple[str, ...] = DEFAULT_ENV_REMOVE
    env_keep: tuple[str, ...] = ()

    @field_validator("env_remove", mode="after")
    @classmethod
    def _keep_built_in_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # A list in a configuration file adds to the built-in patterns: replacing them
        # would let a workspace file hand every token to every command.
        extra = tuple(p for p in value if p not in DEFAULT_ENV_REMOVE)
        return DEFAULT_ENV_REMOVE + tuple(dict.fromkeys(extra))

    @field_validator("network_allow", "network_deny", mode="after")
    @classmethod
    def _readable_entries(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from zuno.config.egress import parse_rules

        parse_rules(value)  # RuleError is a ValueError: a configuration error
        return value

    @property
    def proxied(self) -> bool:
        """Whether commands reach the network only through the egress proxy."""
        return self.network == "proxy"

    @model_validator(mode="after")
    def _default_within_max(self) -> Self:
        if self.timeout_default > self.timeout_max:
            raise ValueError(
                f"sandbox.timeout_default ({self.timeout_default} s) is larger than "
                f"sandbox.timeout_max ({self.timeout_max} s); "
                "lower the default or raise the maximum"
            )
        return self
