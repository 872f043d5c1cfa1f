"""A small MCP server for the tests, written with the SDK.

``python mcp_demo_server.py`` serves over stdio; ``python mcp_demo_server.py
http PORT`` serves streamable HTTP on 127.0.0.1. ``DEMO_MARKS`` names a folder
where ``explode`` leaves a file per call, so a test can tell it ran.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

app = MCPServer("demo")


@app.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def lookup(key: str, count: int = 1) -> str:
    """Look up a key in the demo table."""
    return f"value of {key} x{count}"


@app.tool(annotations=ToolAnnotations(destructive_hint=True))
def explode(target: str) -> str:
    """Destroy a target (leaves a mark; 'die' kills the server mid-call; 'fail' fails)."""
    marks = Path(os.environ.get("DEMO_MARKS", "."))
    (marks / f"exploded-{target}").write_text("boom")
    if target == "die":
        os._exit(3)  # the effect happened, the answer never comes
    if target == "fail":
        raise ToolError(f"cannot explode {target}: it is fireproof")
    return f"exploded {target}"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def spam(lines: int) -> str:
    """Print many lines."""
    return "\n".join(f"line {i}" for i in range(lines))


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """The server's process id (tests kill it to see a silent death)."""
    return os.getpid()


@app.tool()
async def stall(seconds: float) -> str:
    """Take a long time to answer."""
    import anyio

    await anyio.sleep(seconds)
    return "done"


@app.resource("memo://notes", description="The demo notes")
def notes() -> str:
    return "first note\nsecond note"


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
