"""pydantic-ai, as an agent on ``zuno mcp serve`` over stdio, reads what the tools said.

pydantic-ai prefers a result's ``structuredContent`` when every content block
is text, so what a served tool says must be there: ``read``'s text, the
command's output, a denial's reason. The model is pydantic-ai's
``FunctionModel``: it asks for three calls, then records what came back.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from zuno.config.trust import trust

pytestmark = pytest.mark.anyio


async def test_the_model_receives_read_text_shell_output_and_a_denials_reason(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "notes.txt").write_text("the quick brown fox\n")
    rules = [{"tool": "shell", "pattern": "*", "action": "allow"}]
    (workspace / "zuno.json").write_text(json.dumps({"permission": {"rules": rules}}))
    trust(workspace)  # allow rules count from a trusted folder only
    received: dict[str, Any] = {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            assert {"read", "shell", "write"} <= {t.name for t in info.function_tools}
            return ModelResponse(
                parts=[
                    ToolCallPart("read", {"path": "notes.txt"}, tool_call_id="r"),
                    ToolCallPart("shell", {"command": "echo said-by-shell"}, tool_call_id="s"),
                    ToolCallPart("write", {"path": "x.txt", "content": "x"}, tool_call_id="w"),
                ]
            )
        for message in messages:
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    # What the model is given: the return as text (a failed call's too).
                    if isinstance(part, ToolReturnPart):
                        received[part.tool_name] = part.model_response_str()
        return ModelResponse(parts=[TextPart("done")])

    server = MCPToolset(
        StdioTransport(
            command=sys.executable,
            args=["-m", "zuno", "mcp", "serve", "-w", str(workspace)],
            env={
                "ZUNO_CONFIG_HOME": os.environ["ZUNO_CONFIG_HOME"],
                "ZUNO_DB": str(tmp_path / "serve.db"),
                "PATH": os.environ["PATH"],
            },
        ),
        init_timeout=60,
        read_timeout=60,
    )
    agent = Agent(FunctionModel(model), toolsets=[server])
    result = await agent.run("look around")

    assert result.output == "done"
    assert "the quick brown fox" in received["read"]
    assert "said-by-shell" in received["shell"]
    denial = received["write"]
    assert "denied" in denial
    assert "Approvals cannot be asked over MCP" in denial
    assert not (workspace / "x.txt").exists()
