"""Starting ``zuno`` loads no SDK it does not use: no MCP SDK, no provider SDK, no psycopg.

Each check runs in a fresh interpreter and looks at ``sys.modules`` after the
command's own code ran (``zuno --help``, ``zuno tools``, ``zuno call read``),
with no MCP server configured and the default SQLite store.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("mcp", "mcp_types", "openai", "anthropic", "psycopg", "httpx", "httpx2")

PROBE = """
import json, sys
heavy = set(json.loads(sys.argv[2]))
sys.argv = ["zuno", *json.loads(sys.argv[1])]
from zuno.cli import main
try:
    main()
except SystemExit:
    pass
loaded = sorted({name.split(".")[0] for name in sys.modules} & heavy)
sys.__stderr__.write("LOADED " + json.dumps(loaded) + "\\n")
"""


def loaded_after(workspace: Path, *args: str) -> list[str]:
    argv = json.dumps(list(args))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, argv, json.dumps(HEAVY)],
        cwd=workspace,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("LOADED ")]
    return json.loads(line.removeprefix("LOADED "))


def test_importing_the_cli_loads_no_sdk(workspace: Path) -> None:
    code = f"import sys, zuno.cli; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=workspace, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("tools",),
        ("call", "read", '{"path": "notes.txt"}'),
    ],
    ids=["help", "tools", "call-read"],
)
def test_a_command_loads_no_sdk_it_does_not_use(workspace: Path, args: tuple[str, ...]) -> None:
    (workspace / "notes.txt").write_text("notes\n")
    assert loaded_after(workspace, *args) == []
