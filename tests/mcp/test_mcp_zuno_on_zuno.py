"""Zuno as the MCP client of ``zuno mcp serve``: each tool's output reaches the model once.

``zuno mcp serve`` puts a tool's output in the text block and again under
``output`` in ``structuredContent``, beside the tool's own fields
(``total_lines`` for ``read``). A client that gave the model both would give
a 34 KB file twice; Zuno's client gives the text once and the other fields
after it, labelled.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from zuno.config.loading import Config
from zuno.core.declarations import Outcome
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


async def test_a_served_read_reaches_the_model_once_with_its_fields_labelled(
    workspace: Path, tmp_path: Path
) -> None:
    served = tmp_path / "served"
    served.mkdir()
    # About 34 KB as read shows it (numbered).
    body = "".join(f"line {n} of the served file\n" for n in range(1000))
    (served / "big.txt").write_text(body)
    server = {
        "command": sys.executable,
        "args": ["-m", "zuno", "mcp", "serve", "-w", str(served)],
        "env": {
            "ZUNO_CONFIG_HOME": os.environ["ZUNO_CONFIG_HOME"],
            "ZUNO_DB": str(tmp_path / "served.db"),
        },
        "sandbox": False,  # its store lies outside the client's workspace
        "startup_timeout": 120,
    }
    config = Config.model_validate(
        {
            "mcp": {"servers": {"z": server}},
            "tool_output": {"max_bytes": 60_000, "max_lines": 3000},
        }
    )
    rt = Runtime(workspace, config=config, db_path=tmp_path / "zuno.db", approver=ApproveAll())
    try:
        async with rt:
            assert not rt.mcp_failures, rt.mcp_failures
            session = rt.open_session()
            result = await rt.call(session, "mcp__z__read", {"path": "big.txt", "limit": 2000})
    finally:
        rt.close()

    assert result.outcome is Outcome.OK, result.output
    # One copy fits the limit (nothing was cut to an artifact); two would not.
    assert result.artifact is None, result.output[-300:]
    assert result.output.startswith("   1\tline 0 of the served file\n")
    for n in (0, 500, 999):
        assert result.output.count(f"line {n} of the served file") == 1
    # The fields the text does not say are still given, labelled.
    _, fields = result.output.split("\n[structured content, besides ", 1)
    assert fields.startswith("'output' (the text above)]\n{")
    assert json.loads(fields[fields.index("{") :])["total_lines"] == 1000
