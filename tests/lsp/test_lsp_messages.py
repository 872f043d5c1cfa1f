"""The messages as lsprotocol types: what the client announces, the answers' shapes, laziness.

The fake server (``fake_lsp_server.py``) answers in the protocol's less common
shapes (mode ``shapes``) and with answers that are not valid LSP (mode
``malformed``); pyright's own shapes are covered by ``test_lsp_pyright.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from lsp_support import fake_server, requires_pyright

from zuno.config.lsp import LspSettings
from zuno.core.declarations import Outcome
from zuno.dispatch.dispatcher import CallResult
from zuno.execution.server_launch import find_program
from zuno.integrations.lsp.client import CLIENT_CAPABILITIES, LspClient
from zuno.integrations.lsp.errors import ResponseError
from zuno.integrations.lsp.pool import LSP_SERVERS
from zuno.integrations.lsp.protocol import answer_of, to_json
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


async def call(rt: Runtime, **args: Any) -> CallResult:
    return await rt.call(rt.open_session(), "lsp", args)


def fake_runtime(make_runtime: Any, ws: Path, mode: str, timeout: float = 5) -> Runtime:
    return make_runtime(
        ws,
        lsp={"servers": fake_server(mode), "request_timeout": timeout},
        replay={"attempts": 1, "base_delay": 0.0},
    )


def test_the_capabilities_announced_are_the_same_json() -> None:
    assert json.loads(json.dumps(to_json(CLIENT_CAPABILITIES))) == {
        "general": {"positionEncodings": ["utf-16"]},
        "workspace": {
            "configuration": True,
            "workspaceFolders": True,
            "symbol": {},
            "didChangeWatchedFiles": {"dynamicRegistration": True},
        },
        "textDocument": {
            "synchronization": {"didSave": False, "dynamicRegistration": False},
            "hover": {"contentFormat": ["markdown", "plaintext"]},
            "definition": {"linkSupport": True},
            "references": {},
            "documentSymbol": {"hierarchicalDocumentSymbolSupport": True},
            "publishDiagnostics": {"versionSupport": True, "relatedInformation": False},
        },
        "window": {"workDoneProgress": False},
    }


def test_an_answer_of_the_wrong_shape_is_a_response_error() -> None:
    assert answer_of("textDocument/hover", None) is None
    with pytest.raises(ResponseError, match=r"not valid LSP \(.*\$\.range"):
        answer_of("textDocument/definition", [{"uri": "file:///a.py"}])
    with pytest.raises(ResponseError, match="code 0"):
        answer_of("textDocument/documentSymbol", [{"name": "x", "kind": 99}])


def test_the_lsp_tool_imports_lsprotocol_only_with_a_server(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "import zuno.tools.lsp\n"
        "before = 'lsprotocol' in sys.modules\n"
        "import zuno.integrations.lsp.client\n"
        "print(before, 'lsprotocol' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


async def test_answers_in_the_protocols_other_shapes(
    fake_workspace: Path, make_runtime: Any
) -> None:
    rt = fake_runtime(make_runtime, fake_workspace, "shapes")
    hover = await call(rt, action="hover", path="m.fake", line=1, column=1)
    assert hover.outcome is Outcome.OK and hover.output == "plain part\nmarked part"
    # A definition link names its target by the selection range.
    found = await call(rt, action="definition", path="m.fake", line=1, column=1)
    assert found.output == "1 definition:\nm.fake:1:6  some text"
    flat = await call(rt, action="symbols", path="m.fake")
    assert flat.output == "m.fake: 2 symbols\nstruct Some  1:1\nenum-member TEXT  1:6"
    # A workspace symbol may name its file only: it is listed at the file's start.
    named = await call(rt, action="workspace_symbols", query="Some")
    assert named.output == "1 symbol match 'Some':\ntype-parameter Some  m.fake:1:1"


async def test_answers_that_are_not_lsp_are_errors_and_the_server_is_kept(
    fake_workspace: Path, make_runtime: Any
) -> None:
    rt = fake_runtime(make_runtime, fake_workspace, "malformed", timeout=0.5)
    hover = await call(rt, action="hover", path="m.fake", line=1, column=1)
    assert hover.outcome is Outcome.ERROR
    assert "textDocument/hover failed: the answer is not valid LSP" in hover.output
    assert "$.contents" in hover.output
    # The diagnostics published were not LSP either: dropped, as if none came.
    diagnostics = await call(rt, action="diagnostics", path="m.fake")
    assert diagnostics.outcome is Outcome.ERROR
    assert "no diagnostics were published" in diagnostics.output
    (client,) = LSP_SERVERS.clients(fake_workspace)
    assert client.alive


@requires_pyright
async def test_a_sandboxed_server_outlives_its_client_pid_watchdog(tmp_path: Path) -> None:
    # Servers built on vscode-languageserver check every 3 s that the processId of
    # initialize is alive; inside the sandbox's process namespace Zuno's pid is not.
    (tmp_path / "a.py").write_text("x = 1\n")
    settings = LspSettings().server_for(tmp_path / "a.py")
    assert settings is not None and settings.sandbox
    program = find_program(settings.command[0])
    assert program is not None
    client = LspClient([program, *settings.command[1:]], tmp_path, settings, [".py"])
    try:
        await client.start(timeout=60)
        doc = await client.open_document(tmp_path / "a.py", "python")
        await anyio.sleep(4)
        hover = await client.hover(doc.uri, (0, 0), timeout=30)
        assert hover is not None and client.alive
    finally:
        await client.aclose()
