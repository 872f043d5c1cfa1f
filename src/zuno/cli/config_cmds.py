"""``zuno config`` and ``zuno doctor``: the configuration in effect, and what Zuno needs.

``zuno config schema`` prints the JSON Schema of ``zuno.json``, ``zuno config show``
the configuration read from the user's and the workspace's files, and ``zuno doctor``
checks ripgrep, the store, the files, the language and MCP servers, and the sandbox
(:mod:`zuno.cli.doctor`).
"""

from __future__ import annotations

from pathlib import Path

import typer

from zuno.cli.app import app
from zuno.cli.console import out, print_json
from zuno.cli.errors import user_errors, warn_untrusted
from zuno.cli.options import Db, Json, Workspace

__all__ = ["config_app", "config_schema_command", "config_show", "doctor"]


config_app = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)


app.add_typer(config_app, name="config")


@app.command()
def doctor(workspace: Workspace = Path("."), db: Db = None, json_: Json = False) -> None:
    """Check what Zuno needs: rg, the store, the configuration files and folder trust, the
    language servers, each MCP server, the web_search backend and the sandbox."""
    from zuno.cli.doctor import diagnose, report_lines

    report = diagnose(workspace, db)
    if json_:
        print_json(report)
        return
    for line in report_lines(report):
        out.print(line, markup=False, highlight=False)
    if not report.get("ok", False):
        raise typer.Exit(1)


@config_app.command("schema")
def config_schema_command() -> None:
    """Print the JSON Schema of zuno.json."""
    from zuno.config.loading import config_schema

    print_json(config_schema())


@config_app.command("show")
def config_show(workspace: Workspace = Path(".")) -> None:
    """Print the effective configuration (user file, then workspace file)."""
    from zuno.config.loading import load_config

    with user_errors():
        config = load_config(workspace.resolve())
    warn_untrusted(config)
    print_json({"sources": config.sources, "config": config.model_dump(mode="json")})
