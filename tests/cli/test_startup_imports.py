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
from zuno.cli.main import main
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


# What only running tools, loading a configuration or driving an agent needs: the
# pydantic models of every tool and setting, the dispatcher, the agent loop.
RUNTIME_MODULES = (
    "pydantic",
    "zuno.config.loading",
    "zuno.session.runtime",
    "zuno.dispatch.dispatcher",
    "zuno.tools",
    "zuno.agent.loop",
    "zuno.agent.providers",
)


def _modules_after(workspace: Path, code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(sorted(m for m in {RUNTIME_MODULES!r} if m in sys.modules))"
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=workspace, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_importing_zuno_loads_its_public_names_on_use(workspace: Path) -> None:
    assert _modules_after(workspace, "import zuno") == []
    # Every public name still resolves, to the object its own module defines.
    code = (
        "import importlib, zuno\n"
        "for name in zuno.__all__:\n"
        "    value = getattr(zuno, name)\n"
        "    assert value is getattr(importlib.import_module(value.__module__), name), name\n"
        "from zuno import Runtime, load_config\n"
        "import zuno.session.runtime, zuno.config.loading\n"
        "assert Runtime is zuno.session.runtime.Runtime\n"
        "assert load_config is zuno.config.loading.load_config"
    )
    assert "zuno.session.runtime" in _modules_after(workspace, code)


def test_importing_the_cli_and_its_help_load_no_runtime(workspace: Path) -> None:
    assert _modules_after(workspace, "import zuno.cli") == []
    help_ = (
        "sys.argv = ['zuno', '--help']\n"
        "from zuno.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    assert _modules_after(workspace, help_) == []
