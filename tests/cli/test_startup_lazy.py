"""A command imports what it uses: one tool for `zuno call read`, no engine to list tools.

Each check runs the real command line in a fresh interpreter (stdout a pipe,
as for a program) and looks at ``sys.modules`` afterwards. Import-based, not
timed: a module that is imported costs its import on every machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import json, sys
sys.argv = ["zuno", *json.loads(sys.argv[1])]
from zuno.cli.main import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
sys.stdout.flush()
sys.__stderr__.write("MODULES " + json.dumps([code, sorted(sys.modules)]) + "\\n")
"""

# What listing or calling one tool never needs: the patch engine, the HTML converter,
# the language-server client, the bash grammar, the agent's providers, rich's console.
ENGINES = (
    "zuno.workspace.patch.apply",
    "zuno.integrations.html_text",
    "html_to_markdown",
    "zuno.integrations.lsp.client",
    "tree_sitter",
    "zuno.agent.messages",
    "rich.console",
    "typer.rich_utils",
)


def run_probe(workspace: Path, *args: str) -> tuple[int, set[str], str]:
    """Exit code, imported modules and stdout of ``zuno ARGS`` run in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))],
        cwd=workspace,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("MODULES ")]
    code, modules = json.loads(line.removeprefix("MODULES "))
    return code, set(modules), proc.stdout


def tool_modules(modules: set[str]) -> set[str]:
    return {m for m in modules if m.startswith("zuno.tools.")}


def test_help_for_a_program_imports_neither_pydantic_nor_rich(workspace: Path) -> None:
    code, modules, out = run_probe(workspace, "--help")
    assert code == 0 and "Commands:" in out and "call" in out
    assert not modules & {"pydantic", "rich", "anyio", "typer.rich_utils", "zuno.dispatch.registry"}


def test_call_read_imports_read_alone(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("notes\n")
    code, modules, out = run_probe(workspace, "call", "read", '{"path": "notes.txt"}')
    assert code == 0 and "notes" in out
    # web_search is asked whether a backend is configured, to build the surface.
    read = {
        "zuno.tools.read",
        "zuno.tools.read_lines",
        "zuno.tools.read_missing",
        "zuno.tools.read_page",
    }
    assert tool_modules(modules) == {*read, "zuno.tools.web_search"}
    assert not modules & set(ENGINES)
    assert "zuno.execution.sandbox.probing" not in modules  # no sandbox probe for a read


def test_tools_describes_every_tool_without_their_engines(workspace: Path) -> None:
    code, modules, out = run_probe(workspace, "tools")
    assert code == 0
    listed = {line.split()[0] for line in out.splitlines()[2:] if line and line[0] != " "}
    assert {"read", "glob", "grep", "write", "apply_patch", "shell", "webfetch"} <= listed
    assert not modules & set(ENGINES)


def test_a_call_result_is_printed_as_the_tool_wrote_it(workspace: Path) -> None:
    # Off a terminal rich would expand the tab, and turn ':x:' into an emoji.
    (workspace / "slice.py").write_text("v = l[:x:]\n\t:smile:\n")
    code, _, out = run_probe(workspace, "call", "read", '{"path": "slice.py"}')
    assert code == 0
    assert "1\tv = l[:x:]\n2\t\t:smile:\n" in out


@pytest.mark.parametrize("tool", ["glob", "grep"])
def test_a_missing_rg_still_stops_the_search_tools_with_one_clear_line(
    workspace: Path, tmp_path: Path, tool: str
) -> None:
    (workspace / "notes.txt").write_text("notes\n")
    env = {**os.environ, "ZUNO_RG": str(tmp_path / "no-such-rg")}
    args = {"glob": '{"pattern": "*.txt"}', "grep": '{"pattern": "notes"}'}[tool]

    def call(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "zuno", "call", *argv],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )

    search = call(tool, args)
    assert search.returncode == 2, search.stdout + search.stderr
    assert "ripgrep >= 14 is required" in search.stderr
    assert "Traceback" not in search.stderr
    # A read needs no rg: it is no longer refused for a tool it does not use.
    read = call("read", '{"path": "notes.txt"}')
    assert read.returncode == 0, read.stderr


@pytest.mark.parametrize(
    "package",
    [
        "zuno",
        "zuno.integrations.lsp",
        "zuno.execution.sandbox",
        "zuno.execution.ripgrep",
        "zuno.workspace.patch",
        "zuno.agent.providers",
    ],
)
def test_every_public_name_of_a_lazy_package_resolves(workspace: Path, package: str) -> None:
    # A name added to __all__ but not to the package's table of homes would fail only on use.
    code = (
        "import importlib, sys\n"
        f"package = importlib.import_module({package!r})\n"
        "missing = [n for n in package.__all__ if not hasattr(package, n)]\n"
        "print(missing)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=workspace, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
