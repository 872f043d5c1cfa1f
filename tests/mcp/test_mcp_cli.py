"""``zuno mcp tools``: the configured servers' tools, as a user sees them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from zuno.config.trust import trust

DEMO = Path(__file__).with_name("mcp_demo_server.py")


def zuno(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zuno", *args],
        cwd=workspace,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def configure(workspace: Path, **servers: Any) -> None:
    (workspace / "zuno.json").write_text(json.dumps({"mcp": {"servers": servers}}))
    trust(workspace)  # MCP servers are started from a trusted folder only


def demo(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(DEMO)], **extra}


def test_tools_shows_declarations_and_the_hints_not_believed(workspace: Path) -> None:
    configure(
        workspace,
        plain=demo(),
        trusty=demo(trusted=True, tools={"ghost": {"effect": "read_only"}}),
        off={"command": "no-such-server", "enabled": False},
    )
    proc = zuno(workspace, "mcp", "tools")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "off: disabled" in text
    lines = text.splitlines()
    plain_lookup = lines.index(next(line for line in lines if "mcp__plain__lookup " in line))
    assert "side_effecting / never / exclusive" in lines[plain_lookup]
    assert "hint ignored (server not trusted)" in lines[plain_lookup + 1]
    trusty_lookup = next(line for line in lines if "mcp__trusty__lookup " in line)
    assert "read_only / safe / parallel_safe" in trusty_lookup
    assert "configured tool 'ghost' is not offered by the server" in text


def test_tools_json_rows(workspace: Path) -> None:
    configure(workspace, plain=demo(tools={"explode": {"concurrency": "parallel_safe"}}))
    proc = zuno(workspace, "mcp", "tools", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    explode = rows["mcp__plain__explode"]
    assert (explode["effect"], explode["replay"], explode["concurrency"]) == (
        "side_effecting",
        "never",
        "parallel_safe",
    )
    assert explode["declared_by"] == "configured"
    assert explode["hints"] == {"destructive_hint": True}
    assert rows["mcp__plain__lookup"]["parameters"]["required"] == ["key"]
    assert rows["mcp__plain__read_resource"]["effect"] == "read_only"


def test_a_server_that_fails_to_start_is_one_clear_line(workspace: Path) -> None:
    configure(workspace, broken={"command": "no-such-mcp-server"})
    proc = zuno(workspace, "mcp", "tools")
    assert proc.returncode == 2
    assert "MCP server 'broken' (command: no-such-mcp-server)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unknown_server_name_is_refused(workspace: Path) -> None:
    configure(workspace, plain=demo())
    proc = zuno(workspace, "mcp", "tools", "--server", "nope")
    assert proc.returncode == 2
    assert "no MCP server named nope" in proc.stderr and "plain" in proc.stderr


def test_zuno_tools_lists_mcp_tools_and_names_the_servers_that_failed(workspace: Path) -> None:
    configure(
        workspace,
        plain=demo(),
        trusty=demo(trusted=True),
        broken={"command": "no-such-mcp-server"},
    )

    listed = zuno(workspace, "tools", "--json")
    table = zuno(workspace, "tools")

    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    rows = {row["name"]: row for row in data["tools"]}
    lookup = rows["mcp__plain__lookup"]
    assert (lookup["effect"], lookup["replay"], lookup["concurrency"]) == (
        "side_effecting",
        "never",
        "exclusive",
    )
    assert lookup["declared_by"] == "strict default"
    assert "read_only_hint ignored (server not trusted)" in lookup["notes"]
    trusted = rows["mcp__trusty__lookup"]
    assert (trusted["effect"], trusted["declared_by"]) == ("read_only", "trusted annotations")
    assert rows["read"]["effect"] == "read_only"  # the built-in tools are still there
    (failure,) = data["mcp_failures"]
    assert failure["server"] == "broken" and "no-such-mcp-server" in failure["error"]

    assert table.returncode == 0, table.stderr
    assert "mcp__plain__lookup" in table.stdout
    assert "mcp__plain__lookup: declared by strict default; read_only_hint ignored" in table.stdout
    assert "not offered: the tools of MCP server 'broken'" in table.stdout
    assert "Traceback" not in table.stderr


def test_zuno_tools_says_why_each_server_failed_without_a_traceback(workspace: Path) -> None:
    # A server that writes a line of text where protocol messages belong, then exits.
    chatty = [sys.executable, "-c", "print('hello from a server that logs to stdout')"]
    configure(
        workspace,
        plain=demo(),
        broken={"command": "no-such-mcp-server"},
        chatty={"command": chatty[0], "args": chatty[1:]},
    )

    table = zuno(workspace, "tools")

    assert table.returncode == 0, table.stderr
    assert "Traceback" not in table.stderr + table.stdout, table.stderr
    notes = [line for line in table.stdout.splitlines() if line.startswith("not offered: the")]
    assert (
        "not offered: the tools of MCP server 'broken', which failed to start: "
        "'no-such-mcp-server' was not found; check the command and PATH"
    ) in notes, notes
    (chatty_note,) = [line for line in notes if "'chatty'" in line]
    # What went wrong is named: the line it wrote where the protocol belongs.
    assert "hello from a server that logs to stdout" in chatty_note, chatty_note
    assert "not JSON-RPC" in chatty_note, chatty_note
    assert "mcp__plain__lookup" in table.stdout  # the working server's tools are listed
