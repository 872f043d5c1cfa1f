"""An MCP server that misbehaves on purpose, written with the SDK's low-level server.

``python mcp_fault_server.py`` serves over stdio; ``python mcp_fault_server.py
http PORT`` serves streamable HTTP on 127.0.0.1. Every tool call appends a line
``<tool> <tag>`` to ``$FAULT_MARKS/calls.log`` before doing anything else, so a
test can count the invocations that reached the server.

Tools:
- ``git_add``: annotated idempotent (and not destructive), records, then hangs.
- ``touch``: records and answers.
- ``die``: records, then the server kills itself with SIGKILL (mid-call).
- ``broken_output``: declares an ``outputSchema`` and answers against it.
- ``rich``: answers structured content, an image and an audio clip.
- ``file``: answers a file's text twice, as a text block and as
  ``{"content": text}`` (as file servers do).
- ``slow``: records, waits ``seconds``, then answers.
- ``pid``: the server's process id.

At startup the server writes its process id to ``$FAULT_MARKS/server.pid``.
"""

from __future__ import annotations

import base64
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
WAV = (
    b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00@\x1f\x00\x00"
    b"@\x1f\x00\x00\x01\x00\x08\x00data\x00\x00\x00\x00"
)

_TAG = {"type": "object", "properties": {"tag": {"type": "string"}}}

TOOLS = [
    types.Tool(
        name="git_add",
        description="Stage a path (hangs after recording the call).",
        input_schema=_TAG,
        annotations=types.ToolAnnotations(idempotent_hint=True, destructive_hint=False),
    ),
    types.Tool(name="touch", description="Record a call and answer.", input_schema=_TAG),
    types.Tool(name="die", description="Record a call, then die mid-call.", input_schema=_TAG),
    types.Tool(
        name="broken_output",
        description="Answer a result that breaks its own outputSchema.",
        input_schema=_TAG,
        output_schema={
            "type": "object",
            "properties": {"count": {"type": "integer"}},
            "required": ["count"],
        },
    ),
    types.Tool(
        name="rich",
        description="Answer structured content, an image and an audio clip.",
        input_schema=_TAG,
        output_schema={"type": "object", "properties": {"files": {"type": "integer"}}},
    ),
    types.Tool(
        name="file",
        description="Answer a file's text as text and as structured content.",
        input_schema=_TAG,
    ),
    types.Tool(
        name="slow",
        description="Record a call, wait, then answer.",
        input_schema={
            "type": "object",
            "properties": {"tag": {"type": "string"}, "seconds": {"type": "number"}},
        },
    ),
    types.Tool(
        name="pid",
        description="The server's process id.",
        input_schema={"type": "object"},
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
]


def record(tool: str, arguments: dict[str, Any]) -> None:
    marks = Path(os.environ.get("FAULT_MARKS", "."))
    with (marks / "calls.log").open("a", encoding="utf-8") as log:
        log.write(f"{tool} {arguments.get('tag', '')}\n")
        log.flush()
        os.fsync(log.fileno())


def text(value: str) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=value)]


async def on_list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def on_call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    arguments = params.arguments or {}
    if params.name == "pid":
        return types.CallToolResult(content=text(str(os.getpid())))
    record(params.name, arguments)
    if params.name == "git_add":
        await anyio.sleep(3600)
    if params.name == "slow":
        await anyio.sleep(float(arguments.get("seconds", 0.1)))
    if params.name == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if params.name == "broken_output":
        return types.CallToolResult(
            content=text("counted many things"), structured_content={"count": "many"}
        )
    if params.name == "file":
        body = "".join(f"line {n} of the file\n" for n in range(2000))
        return types.CallToolResult(content=text(body), structured_content={"content": body})
    if params.name == "rich":
        return types.CallToolResult(
            content=[
                types.TextContent(type="text", text="two files"),
                types.ImageContent(
                    type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png"
                ),
                types.AudioContent(
                    type="audio", data=base64.b64encode(WAV).decode(), mime_type="audio/wav"
                ),
            ],
            structured_content={"files": 2, "names": ["a.txt", "b.txt"]},
        )
    return types.CallToolResult(content=text(f"{params.name} {arguments.get('tag', '')} done"))


server: Server[Any] = Server("fault", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def serve_stdio() -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_http(port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if "FAULT_MARKS" in os.environ:
        (Path(os.environ["FAULT_MARKS"]) / "server.pid").write_text(str(os.getpid()))
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        serve_http(int(sys.argv[2]))
    else:
        anyio.run(serve_stdio)
