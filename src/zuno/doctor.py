"""``zuno doctor``: what Zuno found on this machine and in this workspace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zuno.config import CONFIG_NAME, Config, ConfigError, load_config, user_config_path
from zuno.store import default_db_path

__all__ = ["diagnose"]


def diagnose(workspace: Path, db: Path | None = None) -> dict[str, Any]:
    """A report of rg, the store, the configuration files, folder trust and the sandbox."""
    from zuno.ripgrep import RipgrepUnavailable, find_ripgrep

    ok = True
    report: dict[str, Any] = {}
    try:
        rg = find_ripgrep(refresh=True)
        report["rg"] = {"path": str(rg.path), "version": ".".join(map(str, rg.version))}
    except RipgrepUnavailable as exc:
        ok = False
        report["rg"] = {"error": str(exc)}
    report["store"] = str(db or default_db_path())
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
    sandbox = _sandbox(config)
    if sandbox is not None:
        report["sandbox"] = sandbox
        ok = ok and bool(sandbox.get("ok", True))
    report["ok"] = ok
    return report


def _trust(workspace: Path, config: Config | None) -> dict[str, Any]:
    """The trust state of the workspace file, and what it widens while untrusted."""
    from zuno.trust import TrustError, is_trusted

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


def _sandbox(config: Any) -> dict[str, Any] | None:
    try:
        from zuno.sandbox import sandbox_report
    except ImportError:
        return None
    settings = getattr(config, "sandbox", None)
    report = sandbox_report(settings) if settings is not None else sandbox_report()
    return report.as_dict()
