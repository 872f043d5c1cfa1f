"""``zuno trust``: accept (or revoke) a workspace's ``zuno.json``, and the prompt of ``zuno run``.

Until a folder is trusted its ``zuno.json`` can only narrow what the user's
file allows (see :mod:`zuno.config.narrowing`). ``zuno trust`` shows what the file
would widen, then records the folder with the SHA-256 of the file as shown;
any later change makes it untrusted again.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from zuno.cli.app import app
from zuno.cli.console import err, escape, out
from zuno.cli.errors import fail, user_errors
from zuno.cli.options import Json
from zuno.config.trust import (
    TrustError,
    TrustState,
    content_digest,
    is_trusted,
    pinned_now,
    revoke,
    trust,
    trust_file,
    trusted_folders,
)

# The configuration (pydantic models) is imported by the commands that read it.
if TYPE_CHECKING:
    from zuno.config.loading import Config

__all__ = ["offer_trust", "pinned_lines", "trust_command", "widening_lines"]

_SHOWN_CHARS = 160


@app.command("trust")
def trust_command(
    folder: Annotated[
        Path, typer.Argument(help="The workspace folder (default: the current folder).")
    ] = Path("."),
    revoke_: Annotated[
        bool, typer.Option("--revoke", help="Forget the trust of this folder.")
    ] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the trusted folders.")] = False,
    show: Annotated[
        bool, typer.Option("--show", help="Print what trusting would honour; trust nothing.")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", help="Trust without asking (needed without a terminal).")
    ] = False,
    json_: Json = False,
) -> None:
    """Trust FOLDER's zuno.json: show what it widens and runs, ask, honour it until it changes."""
    with user_errors(), _trust_errors():
        if list_:
            _list(json_)
            return
        workspace = folder.resolve()
        if not workspace.is_dir():
            fail(f"{folder} is not a folder")
        if revoke_:
            _revoke(workspace, json_)
            return
        _trust(workspace, show=show, yes=yes, json_=json_)


def _revoke(workspace: Path, json_: bool) -> None:
    found = revoke(workspace)
    if json_:
        _print({"folder": str(workspace), "revoked": found})
    elif found:
        out.print(f"{workspace}: no longer trusted; its zuno.json can only narrow.", markup=False)
    else:
        out.print(f"{workspace}: was not trusted; nothing changed.", markup=False)


def _trust(workspace: Path, *, show: bool, yes: bool, json_: bool) -> None:
    from zuno.config.loading import CONFIG_NAME, load_config

    path = workspace / CONFIG_NAME
    if not path.is_file():
        fail(f"{workspace} has no {CONFIG_NAME}; there is nothing to trust")
    try:
        content = path.read_bytes()
    except OSError as exc:
        fail(f"{path}: cannot be read: {exc.strerror}")
    config = load_config(workspace, trusted=False)
    if config.workspace_digest != content_digest(content):
        fail(f"{path} changed while it was being read; run `zuno trust` again")
    files = pinned_now(workspace, content)
    digest = content_digest(content)
    shown: dict[str, Any] = {
        "folder": str(workspace),
        "sha256": digest,
        "widens": config.untrusted_ignored,
        "files": files,
    }
    if not json_:
        _show(workspace, config, files)
    if not show and not yes:
        if not sys.stdin.isatty():
            fail(
                f"zuno trust asks before trusting {path}, and there is no terminal to ask: "
                "read what it would honour with `zuno trust --show`, then run "
                "`zuno trust --yes` to trust it"
            )
        if not typer.confirm(f"Trust {path} and the files it runs?", default=False, err=True):
            if json_:
                _print({**shown, "trusted": False})
            else:
                out.print("not trusted; nothing changed.", markup=False)
            raise typer.Exit(1)
    if show:
        if json_:
            _print({**shown, "trusted": False})
        else:
            out.print(
                "nothing was trusted (--show); `zuno trust --yes` trusts it as shown.",
                markup=False,
            )
        return
    trust(workspace, digest, files)
    if json_:
        _print({**shown, "trusted": True})
        return
    out.print(
        f"trusted: {workspace} (sha256 {digest[:12]}); a change to zuno.json or to a file "
        "it runs makes it untrusted again. `zuno trust --revoke` undoes this.",
        markup=False,
    )


def _show(workspace: Path, config: Config, files: dict[str, str]) -> None:
    """Print what trusting would honour: each widening setting, each pinned file."""
    from zuno.config.loading import CONFIG_NAME

    lines = widening_lines(workspace, config)
    if lines:
        out.print(
            f"{workspace / CONFIG_NAME} widens what your own configuration allows:", markup=False
        )
        for line in lines:
            out.print(f"  {line}", markup=False, highlight=False)
    else:
        out.print(
            f"{workspace / CONFIG_NAME} only narrows; trusting it changes nothing today.",
            markup=False,
        )
    for line in pinned_lines(files):
        out.print(f"  {line}", markup=False, highlight=False)


def pinned_lines(files: dict[str, str]) -> list[str]:
    """One line per workspace file the configuration runs, with its digest (pinned on trust)."""
    return [f"runs {name} (sha256 {digest[:12]}, pinned)" for name, digest in files.items()]


def widening_lines(workspace: Path, config: Config) -> list[str]:
    """One line per ignored key of an untrusted file: its name and the value it sets."""
    from zuno.config.loading import CONFIG_NAME

    data: Any
    try:
        data = json.loads((workspace / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    lines: list[str] = []
    for name in config.untrusted_ignored:
        value: Any = data
        for part in name.split(" ", 1)[0].split("."):
            value = cast(dict[str, Any], value).get(part) if isinstance(value, dict) else None
        if name.endswith("(allow rules)") and isinstance(value, list):
            value = [r for r in cast(list[Any], value) if _is_allow(r)]
        shown = json.dumps(value, ensure_ascii=False)
        if len(shown) > _SHOWN_CHARS:
            shown = shown[: _SHOWN_CHARS - 3] + "..."
        lines.append(f"{name}: {shown}")
    return lines


def _is_allow(rule: Any) -> bool:
    return isinstance(rule, dict) and cast(dict[str, Any], rule).get("action") == "allow"


def offer_trust(workspace: Path) -> None:
    """On a terminal: when the workspace file is untrusted and widens, ask once to trust it.

    The default answer is no. A yes records the digest of the content that was
    shown, so a file changed while the question was open stays untrusted.
    """
    from zuno.config.loading import CONFIG_NAME, ConfigError, load_config

    try:
        config = load_config(workspace.resolve())
    except ConfigError:
        return  # the runtime reports it as a startup error
    if not config.untrusted_ignored:
        return
    state = config.workspace_trust
    why = (
        f"changed since you trusted it ({config.trust_changed or 'zuno.json'} changed)"
        if state == TrustState.CHANGED
        else "is not trusted"
    )
    err.print(
        f"[yellow]{escape(str(workspace.resolve() / CONFIG_NAME))} {why}.[/] Until it is, "
        "these settings that widen what your own configuration allows are ignored:",
        markup=True,
    )
    try:
        content = (workspace.resolve() / CONFIG_NAME).read_bytes()
    except OSError:
        return
    if content_digest(content) != config.workspace_digest:
        return  # changed while it was read: the next run asks about the new one
    files = pinned_now(workspace.resolve(), content)
    for line in [*widening_lines(workspace.resolve(), config), *pinned_lines(files)]:
        err.print(f"  {line}", markup=False, highlight=False)
    answer = typer.confirm("Trust this folder's zuno.json?", default=False, err=True)
    if answer and config.workspace_digest is not None:
        try:
            trust(workspace.resolve(), config.workspace_digest, files)
        except TrustError as exc:
            fail(str(exc))


def _list(json_: bool) -> None:
    records = trusted_folders()
    rows = [
        {"folder": folder, "sha256": digest, "state": str(_state(Path(folder)))}
        for folder, digest in records.items()
    ]
    if json_:
        _print(rows)
        return
    if not rows:
        out.print(f"no trusted folders ({trust_file()})", markup=False)
        return
    for row in rows:
        out.print(f"{row['folder']}  {row['state']}", markup=False, highlight=False)


def _state(folder: Path) -> TrustState:
    if not folder.is_dir():
        return TrustState.NO_FILE
    return is_trusted(folder)


def _print(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


@contextmanager
def _trust_errors() -> Generator[None]:
    """Turn a :class:`TrustError` (an unreadable or unwritable record file) into one line."""
    try:
        yield
    except TrustError as exc:
        fail(str(exc))
