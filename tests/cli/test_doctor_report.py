"""``zuno doctor`` reports the language servers, folder trust, each MCP server and web_search.

Through the real command (a new process); the MCP servers are real: the demo
server of tests/mcp and one whose command does not exist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from zuno.cli.doctor import diagnose, report_lines
from zuno.config.trust import trust

ZUNO = Path(sys.executable).parent / "zuno"
DEMO = Path(__file__).parent.parent / "mcp" / "mcp_demo_server.py"


def write_user(data: object) -> None:
    path = Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def doctor(workspace: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Any]:
    """The plain run and the ``--json`` report."""
    args = [str(ZUNO), "doctor", "--db", str(tmp_path / "d.db")]

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*args, *extra],
            cwd=workspace,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=180,
        )

    return run(), json.loads(run("--json").stdout)


def test_a_missing_language_server_is_not_ok_and_says_what_to_install(
    workspace: Path, tmp_path: Path
) -> None:
    missing = {"command": ["zuno-no-such-langserver", "--stdio"], "install": "pip install zls"}
    write_user({"lsp": {"servers": {".py": missing}}})
    plain, report = doctor(workspace, tmp_path)
    assert plain.returncode == 1 and "NOT OK" in plain.stdout
    assert report["ok"] is False
    (entry,) = [s for s in report["lsp"] if ".py" in s["extensions"]]
    assert entry["ok"] is False and entry["path"] is None
    assert "zuno-no-such-langserver" in entry["error"] and "pip install zls" in entry["error"]
    (line,) = [line for line in report_lines(report) if line.startswith("lsp:         .py:")]
    assert "MISSING" in line and "pip install zls" in line


def test_the_default_language_server_is_found_when_installed(
    workspace: Path, tmp_path: Path
) -> None:
    _, report = doctor(workspace, tmp_path)
    (entry,) = [s for s in report["lsp"] if ".py" in s["extensions"]]
    found = (Path(sys.executable).parent / "pyright-langserver").is_file()
    assert entry["ok"] is found
    assert entry["command"][0] == "pyright-langserver"
    if not found:
        assert "pip install pyright" in entry["error"]


def test_each_mcp_server_says_whether_it_starts_and_how_many_tools(
    workspace: Path, tmp_path: Path
) -> None:
    servers = {
        "good": {"command": sys.executable, "args": [str(DEMO)]},
        "ghost": {"command": "zuno-no-such-mcp-server"},
        "off": {"command": "whatever", "enabled": False},
    }
    (workspace / "zuno.json").write_text(json.dumps({"mcp": {"servers": servers}}))
    trust(workspace)
    plain, report = doctor(workspace, tmp_path)
    mcp = report["mcp"]
    assert mcp["good"]["ok"] is True and mcp["good"]["tools"] >= 5
    assert mcp["ghost"]["ok"] is False and "not found" in mcp["ghost"]["error"]
    assert mcp["off"] == {"ok": True, "enabled": False}
    assert report["ok"] is False and plain.returncode == 1
    assert report["workspace_trust"]["state"] == "trusted"
    lines = report_lines(report)
    assert any(line.startswith("mcp:") and "good: started" in line for line in lines)
    (ghost,) = [line for line in lines if "ghost" in line]
    assert "FAILED" in ghost and "not found" in ghost
    assert lines[-1].startswith("NOT OK")


def test_untrusted_servers_are_reported_as_ignored_not_started(
    workspace: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    script = f"open({str(marker)!r}, 'w').close()"
    servers = {"sneaky": {"command": sys.executable, "args": ["-c", script]}}
    (workspace / "zuno.json").write_text(json.dumps({"mcp": {"servers": servers}}))
    _, report = doctor(workspace, tmp_path)
    assert report["workspace_trust"]["state"] == "untrusted"
    assert "mcp.servers" in report["workspace_trust"]["ignored"]
    assert report["mcp"] == {}
    assert not marker.exists()


def test_web_search_says_what_to_set(workspace: Path, tmp_path: Path) -> None:
    report = diagnose(workspace, tmp_path / "d.db")
    assert report["web_search"]["ok"] is False and "web.search" in report["web_search"]["error"]
    write_user({"web": {"search": {"kind": "searxng", "base_url": "http://127.0.0.1:9"}}})
    report = diagnose(workspace, tmp_path / "d.db")
    assert report["web_search"] == {"ok": True, "backend": "searxng", "url": "http://127.0.0.1:9"}
