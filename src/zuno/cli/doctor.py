"""``zuno doctor``: what Zuno found on this machine and in this workspace.

Besides rg, the store, the configuration files, folder trust and the sandbox,
it checks what a tool needs before a model finds out by failing: the language
server of each extension the ``lsp`` slot serves (a plain ``pip install`` has
no pyright), each configured MCP server (started, listed, its tools counted,
then stopped) and the ``web_search`` backend. A missing language server or an
MCP server that does not start makes the report not ok; a missing search
backend does not (``web_search`` is simply not offered).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zuno.config.loading import CONFIG_NAME, Config, ConfigError, load_config, user_config_path
from zuno.durability.store import store_location

__all__ = ["diagnose", "report_lines"]


def diagnose(workspace: Path, db: Path | None = None) -> dict[str, Any]:
    """A report of rg, the store, the configuration files, folder trust, the language
    servers, the MCP servers, the web_search backend and the sandbox."""
    from zuno.execution.ripgrep._locate import RipgrepUnavailable, find_ripgrep

    ok = True
    report: dict[str, Any] = {}
    try:
        rg = find_ripgrep(refresh=True)
        report["rg"] = {"path": str(rg.path), "version": ".".join(map(str, rg.version))}
    except RipgrepUnavailable as exc:
        ok = False
        report["rg"] = {"error": str(exc)}
    report["store"] = store_location(db)
    ws = workspace.resolve()
    candidates = [user_config_path(), ws / CONFIG_NAME]
    report["config_files"] = {str(p): ("found" if p.is_file() else "absent") for p in candidates}
    try:
        config = load_config(ws)
        report["permission_mode"] = config.permission.mode
    except ConfigError as exc:
        ok = False
        report["config_error"] = str(exc)
        config = None
    report["workspace_trust"] = _trust(ws, config)
    report["lsp"] = _language_servers(config)
    ok = ok and all(entry["ok"] for entry in report["lsp"])
    report["mcp"] = _mcp_servers(config, ws)
    ok = ok and all(entry["ok"] for entry in report["mcp"].values())
    report["web_search"] = _web_search(config)
    sandbox = _sandbox(config)
    if sandbox is not None:
        report["sandbox"] = sandbox
        ok = ok and bool(sandbox.get("ok", True))
    from zuno.cli.server_wire import server_state

    report["command_server"] = server_state()
    report["ok"] = ok
    return report


def _trust(workspace: Path, config: Config | None) -> dict[str, Any]:
    """The trust state of the workspace file, and what it widens while untrusted."""
    from zuno.config.trust import TrustError, is_trusted

    if config is not None:
        state: str = config.workspace_trust
    else:
        try:
            state = is_trusted(workspace)
        except TrustError as exc:
            state = f"unknown: {exc}"
    return {
        "file": str(workspace / CONFIG_NAME),
        "state": state,
        "ignored": config.untrusted_ignored if config is not None else [],
    }


def _language_servers(config: Config | None) -> list[dict[str, Any]]:
    """Each language server the ``lsp`` slot would start: found, or what to install."""
    from zuno.config.lsp import LspSettings
    from zuno.execution.server_launch import find_program

    settings = config.lsp if config is not None else LspSettings()
    by_command: dict[tuple[str, ...], dict[str, Any]] = {}
    extensions: dict[tuple[str, ...], list[str]] = {}
    for ext, server in settings.all_servers().items():
        key = tuple(server.command)
        extensions.setdefault(key, []).append(ext)
        entry = by_command.get(key)
        if entry is None:
            path = find_program(server.command[0])
            entry = {
                "extensions": extensions[key],
                "command": list(server.command),
                "path": path,
                "ok": bool(path),
            }
            if path is None:
                install = f"; install it: {server.install}" if server.install else ""
                entry["error"] = (
                    f"{server.command[0]!r} was not found next to Python or on PATH{install}"
                )
            by_command[key] = entry
    return list(by_command.values())


def _mcp_servers(config: Config | None, workspace: Path) -> dict[str, dict[str, Any]]:
    """Each configured MCP server: started and listed (how many tools), or why not."""
    if config is None or not config.mcp.servers:
        return {}
    import anyio

    from zuno.integrations.mcp.client import connect_mcp_servers

    async def probe() -> dict[str, dict[str, Any]]:
        async with connect_mcp_servers(config, workspace, skip_failed=True) as servers:
            found: dict[str, dict[str, Any]] = {}
            for name, settings in config.mcp.servers.items():
                connection = servers.get(name)
                if not settings.enabled:
                    found[name] = {"ok": True, "enabled": False}
                elif connection is not None:
                    found[name] = {
                        "ok": True,
                        "tools": len(connection.tools),
                        "resources": len(connection.resources),
                    }
                else:
                    failure = servers.failures.get(name)
                    found[name] = {
                        "ok": False,
                        "error": failure.summary if failure else "not started",
                    }
            return found

    return anyio.run(probe)


def _web_search(config: Config | None) -> dict[str, Any]:
    """Whether ``web_search`` has a backend (without one it is not offered)."""
    from zuno.tools.web_search import NOT_CONFIGURED

    search = config.web.search if config is not None else None
    if search is None:
        return {"ok": False, "error": NOT_CONFIGURED}
    return {"ok": True, "backend": search.kind, "url": search.url}


def _sandbox(config: Any) -> dict[str, Any] | None:
    try:
        from zuno.execution.sandbox.selection import sandbox_report
    except ImportError:
        return None
    settings = getattr(config, "sandbox", None)
    report = sandbox_report(settings) if settings is not None else sandbox_report()
    return report.as_dict()


def _server_line(server: dict[str, Any]) -> str:
    if not server.get("enabled"):
        return "off (ZUNO_SERVER)"
    if server.get("problem"):
        return f"NOT USED: {server['folder']}: {server['problem']}"
    if server.get("running"):
        return f"running, pid {server['pid']}, {server['served']} command(s) served"
    return "not running (the next short command starts it)"


def report_lines(report: dict[str, Any]) -> list[str]:
    """The report as a person reads it, one finding a line (``--json`` has every field)."""
    rg = report.get("rg", {})
    found = f"{rg.get('version')} at {rg.get('path')}" if "path" in rg else None
    lines = [
        f"rg:          {found or 'MISSING: ' + str(rg.get('error'))}",
        f"store:       {report.get('store')}",
    ]
    for path, state in report.get("config_files", {}).items():
        lines.append(f"config:      {path} ({state})")
    if "config_error" in report:
        lines.append(f"config:      ERROR: {report['config_error']}")
    trust = report.get("workspace_trust")
    if trust and trust.get("state") != "no workspace file":
        ignored: list[str] = trust.get("ignored") or []
        detail = f"; ignored: {', '.join(ignored)} (zuno trust honours them)" if ignored else ""
        lines.append(f"trust:       {trust['file']} {trust['state']}{detail}")
    if "permission_mode" in report:
        lines.append(f"permission:  {report['permission_mode']} mode")
    for server in report.get("lsp", []):
        exts = " ".join(server["extensions"])
        state = (
            f"{server['command'][0]} at {server['path']}"
            if server["ok"]
            else (f"MISSING: {server.get('error')}")
        )
        lines.append(f"lsp:         {exts}: {state}")
    for name, mcp in report.get("mcp", {}).items():
        if mcp.get("enabled") is False:
            state = "disabled"
        elif mcp["ok"]:
            state = f"started, {mcp['tools']} tool(s), {mcp['resources']} resource(s)"
        else:
            state = f"FAILED: {mcp.get('error')}"
        lines.append(f"mcp:         {name}: {state}")
    search = report.get("web_search")
    if search:
        state = (
            f"{search['backend']} at {search['url']}"
            if search["ok"]
            else f"not offered ({search['error']})"
        )
        lines.append(f"web_search:  {state}")
    sandbox = report.get("sandbox")
    if sandbox:
        chosen = sandbox.get("selected") or "none"
        value = sandbox.get("network")
        network = "through the egress proxy" if value == "proxy" else "on" if value else "off"
        lines.append(
            f"sandbox:     {chosen} (asked: {sandbox.get('kind')}), mode {sandbox.get('mode')}, "
            f"network {network}"
        )
        if sandbox.get("error"):
            lines.append(f"             ERROR: {sandbox['error']}")
        for backend in sandbox.get("backends", []):
            state = "available" if backend.get("available") else "unavailable"
            lines.append(f"             {backend['name']}: {state} ({backend.get('detail')})")
        withheld: list[str] = sandbox.get("withheld_env") or []
        if withheld:
            lines.append(
                f"             withheld from commands: {', '.join(withheld)} "
                "(sandbox.env_keep lets a named one through)"
            )
    server = report.get("command_server")
    if server:
        lines.append(f"server:      {_server_line(server)}")
    lines.append("ok" if report.get("ok") else "NOT OK: see the lines above")
    return lines
