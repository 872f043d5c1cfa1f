"""Tool specs are made once a process: every session of a fleet worker shares them.

A worker builds a runtime and a surface per session; the JSON Schema of every
tool used to be generated again each time, and the providers' tables adapted
it again. A tool whose schema is its own (an MCP server's) is still asked each time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from zuno.agent.loop import tool_specs
from zuno.agent.messages import ToolSpec
from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolResult
from zuno.core.declarations import READ_ONLY_SAFE_PARALLEL, Declaration
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime


def test_sessions_of_two_runtimes_share_their_tool_specs(workspace: Path, tmp_path: Path) -> None:
    specs: list[list[ToolSpec]] = []
    for n in (1, 2):
        rt = Runtime(workspace, db_path=tmp_path / f"{n}.db", approver=ApproveAll())
        specs.append(tool_specs(rt.open_session().surface))
        rt.close()
    first, second = specs
    assert [s.name for s in first] == [s.name for s in second]
    assert "read" in [s.name for s in first]
    assert all(a is b for a, b in zip(first, second, strict=True))


class _Args(ToolArgs):
    payload: dict[str, Any] = {}


class _Remote(Tool[_Args]):
    """A tool whose schema is its server's, which may change between sessions."""

    name: ClassVar[str] = "remote"
    description: ClassVar[str] = "A remote tool."
    args_model = _Args
    declaration: ClassVar[Declaration] = READ_ONLY_SAFE_PARALLEL

    def __init__(self, schema: dict[str, Any]) -> None:
        self.given = schema

    def schema(self) -> dict[str, Any]:
        return dict(self.given)

    async def run(self, args: _Args, ctx: ToolContext) -> ToolResult:
        return ToolResult("")


def test_a_tool_with_a_schema_of_its_own_is_asked_each_time(
    workspace: Path, tmp_path: Path
) -> None:
    seen: list[Any] = []
    for n, kind in ((1, "string"), (2, "integer")):
        schema = {"type": "object", "properties": {"x": {"type": kind}}}
        rt = Runtime(
            workspace,
            db_path=tmp_path / f"{n}.db",
            approver=ApproveAll(),
            tools=[_Remote(schema)],
        )
        seen.append(tool_specs(rt.open_session().surface)[0].parameters["properties"]["x"])
        rt.close()
    assert seen == [{"type": "string"}, {"type": "integer"}]
