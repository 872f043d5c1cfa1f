"""The lsp tool against the real pyright-langserver, through the dispatcher.

One workspace (and so one pyright) serves the whole module; each test makes
its own runtime over it. The approver denies everything: lsp is read-only and
must never be prompted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from lsp_support import requires_pyright

from zuno.core.declarations import INSPECTION, BlockKind, Outcome
from zuno.dispatch.dispatcher import CallRequest, CallResult
from zuno.dispatch.registry import SLOTS
from zuno.integrations.lsp.client import LspClient
from zuno.integrations.lsp.pool import LSP_SERVERS
from zuno.session.runtime import Runtime

pytestmark = [pytest.mark.anyio, requires_pyright]

# pyright can be slow to start on a loaded machine; no test asserts a duration.
GENEROUS = {"lsp": {"request_timeout": 60, "startup_timeout": 60}}


async def lsp(runtime: Runtime, **args: Any) -> CallResult:
    session = runtime.open_session()
    return await runtime.call(session, "lsp", args)


def ok(result: CallResult) -> str:
    assert result.outcome is Outcome.OK, result.output
    return result.output


async def test_definition_of_a_function_from_another_file(
    py_workspace: Path, make_runtime: Any
) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    # b.py line 4: print(greet("bob")); greet starts at column 7.
    out = ok(await lsp(rt, action="definition", path="b.py", line=4, column=8))
    assert out == "1 definition:\na.py:1:5  def greet(name: str) -> str:"


async def test_references_across_files(py_workspace: Path, make_runtime: Any) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    out = ok(await lsp(rt, action="references", path="a.py", line=1, column=5))
    lines = out.splitlines()
    assert lines[0].endswith("references:")
    assert "a.py:1:5  def greet(name: str) -> str:" in lines
    assert "b.py:1:15  from a import greet" in lines
    assert 'b.py:4:7  print(greet("bob"))' in lines
    assert 'c.py:3:14  pair = ("\U0001f600", greet("ann"))' in lines


async def test_hover_shows_the_signature_and_docstring(
    py_workspace: Path, make_runtime: Any
) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    out = ok(await lsp(rt, action="hover", path="b.py", line=4, column=7))
    assert "def greet(name: str) -> str" in out
    assert "Say hello." in out
    assert "```" not in out


async def test_columns_are_characters_even_after_an_emoji(
    py_workspace: Path, make_runtime: Any
) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    line = (py_workspace / "c.py").read_text().splitlines()[2]
    column = line.index("greet") + 1
    out = ok(await lsp(rt, action="hover", path="c.py", line=3, column=column))
    assert "def greet(name: str) -> str" in out


async def test_diagnostics_report_a_type_error(py_workspace: Path, make_runtime: Any) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    out = ok(await lsp(rt, action="diagnostics", path="b.py"))
    first, second = out.splitlines()
    assert first == "b.py: 1 error"
    assert second.startswith("b.py:3:10 error Type \"Literal['s']\" is not assignable")
    assert second.endswith("[reportAssignmentType]")
    clean = ok(await lsp(rt, action="diagnostics", path="a.py"))
    assert clean == "No diagnostics for a.py."


async def test_a_file_changed_on_disk_is_sent_again(py_workspace: Path, make_runtime: Any) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    path = py_workspace / "d.py"
    path.write_text("y: str = 1\n")
    out = ok(await lsp(rt, action="diagnostics", path="d.py"))
    assert "d.py:1:10 error" in out
    path.write_text("y: str = 'fixed'\n\n\ndef later() -> None: ...\n")
    # Some file systems keep the old mtime for a quick rewrite; the size differs anyway.
    assert ok(await lsp(rt, action="diagnostics", path="d.py")) == "No diagnostics for d.py."
    symbols = ok(await lsp(rt, action="symbols", path="d.py"))
    assert "function later  4:5" in symbols
    os.remove(path)


async def test_symbols_of_a_file_as_a_tree(py_workspace: Path, make_runtime: Any) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    out = ok(await lsp(rt, action="symbols", path="a.py"))
    lines = out.splitlines()
    assert lines[0].startswith("a.py: ")
    assert "function greet  1:5" in lines
    box = lines.index("class Box  6:7")
    assert lines[box + 1] == "  method size  7:9"


async def test_workspace_symbols_by_query(py_workspace: Path, make_runtime: Any) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    out = ok(await lsp(rt, action="workspace_symbols", query="Box"))
    assert out.splitlines() == ["1 symbol match 'Box':", "class Box  a.py:6:7"]
    none = ok(await lsp(rt, action="workspace_symbols", query="NoSuchThingAnywhere"))
    assert none == "No symbols match 'NoSuchThingAnywhere'."


async def test_nothing_found_is_said_plainly(py_workspace: Path, make_runtime: Any) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    # Line 2 of a.py is inside a docstring: no definition there.
    out = ok(await lsp(rt, action="definition", path="a.py", line=2, column=8))
    assert out == "No definitions found at a.py:2:8."


async def test_one_server_per_workspace_is_kept(py_workspace: Path, make_runtime: Any) -> None:
    first = make_runtime(py_workspace, **GENEROUS)
    second = make_runtime(py_workspace, **GENEROUS)
    ok(await lsp(first, action="symbols", path="a.py"))
    ok(await lsp(second, action="symbols", path="b.py"))
    clients = LSP_SERVERS.clients(py_workspace)
    assert len(clients) == 1 and clients[0].alive


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"action": "hover", "path": "b.py", "line": 4}, "hover needs path, line and column"),
        ({"action": "definition", "line": 1, "column": 1}, "needs path, line and column"),
        ({"action": "symbols"}, "symbols needs path"),
        ({"action": "diagnostics", "path": "b.py", "line": 3}, "does not take line"),
        ({"action": "hover", "path": "b.py", "line": 1, "column": 1, "query": "x"}, "query"),
        ({"action": "workspace_symbols"}, "needs a non-blank query"),
        ({"action": "workspace_symbols", "query": "   "}, "needs a non-blank query"),
        ({"action": "hover", "path": "b.py", "line": 0, "column": 1}, "greater than or equal"),
        ({"action": "rename", "path": "b.py"}, "action"),
        ({"action": "hover", "path": "b.py", "line": 99, "column": 1}, "past the end of b.py"),
        ({"action": "hover", "path": "b.py", "line": 1, "column": 99}, "past the end of line 1"),
    ],
)
async def test_bad_arguments_are_blocked(
    py_workspace: Path, make_runtime: Any, args: dict[str, Any], message: str
) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    result = await lsp(rt, **args)
    assert result.outcome is Outcome.BLOCKED, result.output
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert message in result.output


async def test_paths_outside_the_workspace_are_refused(
    py_workspace: Path, make_runtime: Any, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("z = 1\n")
    link = py_workspace / "link.py"
    link.symlink_to(outside)
    try:
        rt = make_runtime(py_workspace, **GENEROUS)
        for path in (str(outside), "../outside.py", "link.py"):
            result = await lsp(rt, action="symbols", path=path)
            assert result.outcome is Outcome.BLOCKED, path
            assert result.block_kind is BlockKind.INVALID_ARGUMENTS
            assert "outside the workspace" in result.output
    finally:
        link.unlink()


async def test_missing_files_and_unserved_extensions_are_errors(
    py_workspace: Path, make_runtime: Any
) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    missing = await lsp(rt, action="symbols", path="nope.py")
    assert missing.outcome is Outcome.ERROR and "nope.py is not found" in missing.output
    (py_workspace / "notes.txt").write_text("hello\n")
    unserved = await lsp(rt, action="symbols", path="notes.txt")
    assert unserved.outcome is Outcome.ERROR
    assert "no language server is configured for .txt files" in unserved.output
    assert "lsp.servers" in unserved.output


async def test_a_server_that_is_not_installed_names_the_command_and_the_fix(
    py_workspace: Path, make_runtime: Any
) -> None:
    rt = make_runtime(
        py_workspace,
        lsp={"servers": {".py": {"command": ["no-such-langserver", "--stdio"]}}},
    )
    result = await lsp(rt, action="symbols", path="a.py")
    assert result.outcome is Outcome.ERROR
    assert "`no-such-langserver --stdio`" in result.output
    assert "not installed" in result.output and "lsp.servers" in result.output
    default = make_runtime(
        py_workspace,
        lsp={
            "servers": {
                ".py": {"command": ["no-such-langserver"], "install": "pip install pyright"}
            }
        },
    )
    hinted = await lsp(default, action="workspace_symbols", query="Box", path="a.py")
    assert hinted.outcome is Outcome.ERROR and "pip install pyright" in hinted.output


async def test_declared_as_an_inspection(py_workspace: Path, make_runtime: Any) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    result = await lsp(rt, action="symbols", path="a.py")
    assert result.declaration == INSPECTION


def test_lsp_is_a_slot_absent_from_the_default_surface(
    py_workspace: Path, make_runtime: Any
) -> None:
    assert "lsp" in SLOTS
    plain = make_runtime(py_workspace, tools={})
    assert "lsp" not in plain.surface().names
    assert "lsp" in plain.registry.names()
    switched = make_runtime(py_workspace, tools={"lsp": True})
    assert "lsp" in switched.surface().names
    named = make_runtime(py_workspace, tools={}, agents={"inspector": {"tools": ["read", "lsp"]}})
    assert named.surface("inspector").names == ["read", "lsp"]


async def test_calls_to_an_inactive_lsp_are_unavailable(
    py_workspace: Path, make_runtime: Any
) -> None:
    rt = make_runtime(py_workspace, tools={})
    result = await lsp(rt, action="symbols", path="a.py")
    assert result.outcome is Outcome.BLOCKED and result.block_kind is BlockKind.UNAVAILABLE


@pytest.mark.parametrize("bound", [1, 2])
async def test_requests_in_flight_respect_the_bound(
    py_workspace: Path, make_runtime: Any, monkeypatch: pytest.MonkeyPatch, bound: int
) -> None:
    in_flight = 0
    peak = 0
    original = LspClient.request
    reached = anyio.Event()

    async def recording(
        self: LspClient,
        method: str,
        params: Any,
        *,
        timeout: float,  # noqa: ASYNC109 - the signature of LspClient.request
    ) -> Any:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight >= bound:
            reached.set()
        try:
            # Hold the first requests until the bound is reached, so that any excess overlaps.
            with anyio.move_on_after(10):
                await reached.wait()
            return await original(self, method, params, timeout=timeout)
        finally:
            in_flight -= 1

    monkeypatch.setattr(LspClient, "request", recording)
    rt = make_runtime(
        py_workspace, concurrency={"lsp_requests": bound, "tool_calls": 8}, **GENEROUS
    )
    session = rt.open_session()
    calls = [
        CallRequest("lsp", {"action": "hover", "path": "b.py", "line": 4, "column": 7})
        for _ in range(6)
    ]
    results = await rt.dispatch(session, calls)
    assert all(r.outcome is Outcome.OK for r in results), [r.output for r in results]
    assert all("def greet" in r.output for r in results)
    assert peak == bound


async def test_files_created_after_the_server_started_are_seen(
    py_workspace: Path, make_runtime: Any
) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    ok(await lsp(rt, action="references", path="a.py", line=1, column=5))  # server running
    late = py_workspace / "late.py"
    late.write_text("from a import greet\n\ngreet('late')\n")
    try:
        out = ok(await lsp(rt, action="references", path="a.py", line=1, column=5))
        assert "late.py:3:1  greet('late')" in out.splitlines()
    finally:
        late.unlink()
    after = ok(await lsp(rt, action="references", path="a.py", line=1, column=5))
    assert "late.py" not in after


async def test_diagnostics_follow_a_change_in_an_imported_file(
    py_workspace: Path, make_runtime: Any
) -> None:
    rt = make_runtime(py_workspace, **GENEROUS)
    lib, user = py_workspace / "lib2.py", py_workspace / "user2.py"
    lib.write_text("def f() -> int:\n    return 1\n")
    user.write_text("from lib2 import f\n\nv: int = f()\n")
    try:
        assert ok(await lsp(rt, action="diagnostics", path="user2.py")) == (
            "No diagnostics for user2.py."
        )
        lib.write_text("def f() -> str:\n    return 'now a string'\n")
        out = ok(await lsp(rt, action="diagnostics", path="user2.py"))
        assert out.splitlines()[1].startswith('user2.py:3:10 error Type "str" is not assignable')
    finally:
        lib.unlink()
        user.unlink()
