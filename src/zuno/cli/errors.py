"""How a command stops or warns: one clear line on stderr, never a traceback.

:func:`fail` ends a command with a message and an exit status;
:func:`user_errors` turns the errors a person can act on (a bad configuration,
an unknown session or agent, no ripgrep, no sandbox, an MCP server that failed,
a store that cannot be used) into that line. The warnings about the workspace
are said once per process.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from typing import Any, NoReturn

import typer

from zuno.cli.console import err, escape
from zuno.durability.store import StoreError

__all__ = [
    "UsageError",
    "error_text",
    "fail",
    "user_errors",
    "warn_control_paths",
    "warn_untrusted",
]


class UsageError(Exception):
    pass


def fail(message: str, code: int = 2) -> NoReturn:
    # One line however long (scripts grep it), and the message is never read as markup.
    err.print(f"[bold red]zuno:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def user_errors() -> Generator[None]:
    """Turn the errors a user can act on into one clear line, never a traceback."""
    from zuno.config.loading import ConfigError
    from zuno.execution.ripgrep._locate import RipgrepUnavailable
    from zuno.execution.sandbox.policy import SandboxError
    from zuno.integrations.mcp.errors import McpServerError
    from zuno.session.lifecycle import UnknownSession
    from zuno.session.runtime import UnknownAgent

    try:
        yield
    except (
        ConfigError,
        UnknownSession,
        UnknownAgent,
        UsageError,
        RipgrepUnavailable,
        SandboxError,
        McpServerError,
        StoreError,
    ) as exc:
        fail(error_text(exc))


def error_text(exc: BaseException) -> str:
    """An exception's message as the user reads it.

    Only a KeyError's own quotes (``str`` shows its argument's repr) are left
    out: a message that ends in a quoted value keeps its closing quote.
    """
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)


_warned: set[str] = set()


def warn_untrusted(config: Any) -> None:
    """Say once per process what an untrusted workspace ``zuno.json`` tried to widen."""
    warning = config.untrusted_warning()
    if warning and warning not in _warned:
        _warned.add(warning)
        err.print(
            f"[yellow]zuno:[/] {escape(warning)}", markup=True, highlight=False, soft_wrap=True
        )


def warn_control_paths(rt: Any) -> None:
    """Say once per process when the workspace holds Zuno's own folders (config, data)."""
    warning = rt.control_paths.workspace_warning(rt.workspace)
    if warning and warning not in _warned:
        _warned.add(warning)
        err.print(
            f"[yellow]zuno:[/] {escape(warning)}", markup=True, highlight=False, soft_wrap=True
        )
