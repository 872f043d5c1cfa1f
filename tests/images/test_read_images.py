"""``read`` of an image: image content for models that see, a plain sentence for those that do not.

Every test runs the agent loop (or the ``zuno`` command) against the scripted
model server on 127.0.0.1 and judges by what the server received: an image
block inside Anthropic's ``tool_result``, an ``image_url`` part in a user
message after OpenAI's tool messages, or no image at all. Files are recognised
by their first bytes, never by their names, and a resumed session sends the
image again from the call's artifact, whatever happened to the file since.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))

from fake_api import FakeModelServer, RecordedRequest, Reply
from image_bytes import gif, jpeg, png, webp

from zuno.agent.loop import AgentLoop, TurnOutcome, provider_for
from zuno.config.loading import Config
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

Kind = Literal["openai", "anthropic"]
MODEL = "fake:test-model"
ZUNO = Path(sys.executable).parent / "zuno"

FORMATS = {
    "png": (png(3, 2), "image/png", "PNG", "3x2"),
    "jpeg": (jpeg(16, 8), "image/jpeg", "JPEG", "16x8"),
    "gif": (gif(1, 1), "image/gif", "GIF", "1x1"),
    "webp": (webp(5, 4), "image/webp", "WebP", "5x4"),
}


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as running:
        yield running


def runtime(
    workspace: Path,
    server: FakeModelServer,
    kind: Kind,
    *,
    images: bool | None = None,
    **config: Any,
) -> Runtime:
    url = server.openai_base_url if kind == "openai" else server.anthropic_base_url
    provider: dict[str, Any] = {"kind": kind, "base_url": url, "attempts": 1}
    if images is not None:
        provider["images"] = images
    cfg = Config.model_validate({"providers": {"fake": provider}, **config})
    return Runtime(
        workspace, config=cfg, db_path=workspace.parent / "zuno.db", approver=ApproveAll()
    )


async def turn(rt: Runtime, prompt: str | None, session_id: str | None = None) -> TurnOutcome:
    state = rt.open_session(session_id, agent="build", model=MODEL)
    provider = provider_for(rt, MODEL)
    try:
        async with rt:
            return await AgentLoop(rt, state, provider).run(prompt)
    finally:
        await provider.aclose()


def read_call(call_id: str, path: str) -> tuple[str, str, str]:
    return (call_id, "read", json.dumps({"path": path}))


def anthropic_results(request: RecordedRequest) -> dict[str, dict[str, Any]]:
    """The tool_result blocks of a Messages request, by tool_use_id."""
    return {
        block["tool_use_id"]: block
        for message in request.body["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    }


def image_blocks(result: dict[str, Any]) -> list[dict[str, Any]]:
    content = result["content"]
    return [] if isinstance(content, str) else [b for b in content if b["type"] == "image"]


def text_of(result: dict[str, Any]) -> str:
    content = result["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b["text"] for b in content if b["type"] == "text")


def openai_image_urls(request: RecordedRequest) -> list[str]:
    return [
        part["image_url"]["url"]
        for message in request.body["messages"]
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


def data_url(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


# --- the Python API -------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(FORMATS))
async def test_each_format_reaches_anthropic_as_an_image_block_in_the_tool_result(
    workspace: Path, server: FakeModelServer, name: str
) -> None:
    data, media_type, label, size = FORMATS[name]
    # The name says nothing: the first bytes decide.
    (workspace / f"picture-{name}.bin").write_bytes(data)
    server.enqueue(Reply(tool_calls=[read_call("c1", f"picture-{name}.bin")]), Reply(text="Seen."))
    outcome = await turn(runtime(workspace, server, "anthropic"), "Look at it.")
    assert outcome.answered, outcome.message
    result = anthropic_results(server.requests[1])["c1"]
    assert result["is_error"] is False
    (block,) = image_blocks(result)
    assert block["source"]["type"] == "base64"
    assert block["source"]["media_type"] == media_type
    assert base64.b64decode(block["source"]["data"]) == data
    text = text_of(result)
    assert f"{label} image" in text and size in text


@pytest.mark.anyio
async def test_openai_gets_each_image_in_a_user_message_after_all_tool_messages(
    workspace: Path, server: FakeModelServer
) -> None:
    (workspace / "shot.png").write_bytes(png(640, 480))
    (workspace / "logo.gif").write_bytes(gif(2, 3))
    (workspace / "notes.txt").write_text("plain words\n")
    calls = [read_call("c1", "shot.png"), read_call("c2", "notes.txt"), read_call("c3", "logo.gif")]
    server.enqueue(Reply(tool_calls=calls), Reply(text="Seen."))
    outcome = await turn(runtime(workspace, server, "openai"), "Look at them.")
    assert outcome.answered, outcome.message
    messages = server.requests[1].body["messages"]
    roles = [m["role"] for m in messages]
    # Tool messages answer the calls at once; the images follow in one user message.
    assert roles[-5:] == ["assistant", "tool", "tool", "tool", "user"]
    tools = messages[-4:-1]
    assert [m["tool_call_id"] for m in tools] == ["c1", "c2", "c3"]
    assert all(isinstance(m["content"], str) for m in tools)
    assert "PNG image" in tools[0]["content"] and "640x480" in tools[0]["content"]
    assert "plain words" in tools[1]["content"]
    parts = messages[-1]["content"]
    texts = [p["text"] for p in parts if p["type"] == "text"]
    assert any("c1" in t and "shot.png" in t for t in texts)
    assert any("c3" in t and "logo.gif" in t for t in texts)
    assert openai_image_urls(server.requests[1]) == [
        data_url(png(640, 480), "image/png"),
        data_url(gif(2, 3), "image/gif"),
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_model_that_cannot_see_images_is_told_so_plainly(
    workspace: Path, server: FakeModelServer, kind: Kind
) -> None:
    (workspace / "shot.png").write_bytes(png(640, 480))
    server.enqueue(Reply(tool_calls=[read_call("c1", "shot.png")]), Reply(text="Understood."))
    rt = runtime(workspace, server, kind, images=False)
    outcome = await turn(rt, "Look at it.")
    assert outcome.answered, outcome.message
    request = server.requests[1]
    body = json.dumps(request.body)
    assert "base64" not in body and "image_url" not in body and '"image"' not in body
    if kind == "openai":
        text = request.body["messages"][-1]["content"]
        assert request.body["messages"][-1]["role"] == "tool"
    else:
        text = text_of(anthropic_results(request)["c1"])
    assert "PNG image, 640x480" in text
    assert "this model cannot see images" in text


@pytest.mark.anyio
async def test_an_oversized_image_is_described_and_not_sent(
    workspace: Path, server: FakeModelServer
) -> None:
    big = png(4, 4, padding=8000)
    (workspace / "big.png").write_bytes(big)
    # Small in bytes, but wider than any provider accepts.
    (workspace / "wide.png").write_bytes(png(9000, 1))
    server.enqueue(
        Reply(tool_calls=[read_call("c1", "big.png"), read_call("c2", "wide.png")]),
        Reply(text="Understood."),
    )
    rt = runtime(workspace, server, "anthropic", tool_output={"image_max_bytes": 4096})
    outcome = await turn(rt, "Look at them.")
    assert outcome.answered, outcome.message
    results = anthropic_results(server.requests[1])
    for call_id in ("c1", "c2"):
        assert image_blocks(results[call_id]) == []
        assert results[call_id]["is_error"] is False
    big_text, wide_text = text_of(results["c1"]), text_of(results["c2"])
    assert "PNG image, 4x4" in big_text and "not sent" in big_text
    assert "image_max_bytes" in big_text
    assert "9000x1" in wide_text and "not sent" in wide_text and "8000" in wide_text
    # Nothing of either image was kept to be sent later.
    saved = [p.name for p in (workspace.parent).rglob("*") if p.suffix in (".png", ".jpg")]
    assert sorted(saved) == ["big.png", "wide.png"]


@pytest.mark.anyio
async def test_a_text_file_named_png_is_read_as_text(
    workspace: Path, server: FakeModelServer
) -> None:
    (workspace / "fake.png").write_text("plain words only\nsecond line\n")
    server.enqueue(Reply(tool_calls=[read_call("c1", "fake.png")]), Reply(text="Read."))
    outcome = await turn(runtime(workspace, server, "anthropic"), "Read it.")
    assert outcome.answered, outcome.message
    result = anthropic_results(server.requests[1])["c1"]
    assert image_blocks(result) == []
    text = text_of(result)
    assert "1\tplain words only" in text and "2\tsecond line" in text
    assert "image" not in text.lower()


@pytest.mark.anyio
async def test_resume_sends_the_image_again_from_its_artifact(
    workspace: Path, server: FakeModelServer
) -> None:
    picture = png(7, 5)
    (workspace / "shot.png").write_bytes(picture)
    server.enqueue(Reply(tool_calls=[read_call("c1", "shot.png")]), Reply(text="A grey box."))
    first = await turn(runtime(workspace, server, "anthropic"), "Look at it.")
    assert first.answered, first.message
    # The file changes (it is text now): the conversation still holds what was read.
    (workspace / "shot.png").write_text("overwritten\n")
    server.enqueue(Reply(text="Still a grey box."))
    second = await turn(runtime(workspace, server, "anthropic"), "And now?", first.session_id)
    assert second.answered, second.message
    assert len(server.requests) == 3
    (block,) = image_blocks(anthropic_results(server.requests[2])["c1"])
    assert base64.b64decode(block["source"]["data"]) == picture


# --- the real command -----------------------------------------------------------


def zuno(workspace: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ZUNO), *args],
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def session_of(stderr: str) -> str:
    for word in stderr.replace(".", " ").split():
        if word.startswith("ses_"):
            return word
    raise AssertionError(stderr)


def test_cli_run_sends_the_image_and_resume_sends_it_again(
    workspace: Path, tmp_path: Path, server: FakeModelServer
) -> None:
    picture = png(12, 9)
    (workspace / "diagram.png").write_bytes(picture)
    env = {
        **os.environ,
        "ZUNO_DB": str(tmp_path / "run.db"),
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": "sk-test",
    }
    server.enqueue(Reply(tool_calls=[read_call("c1", "diagram.png")]), Reply(text="A diagram."))
    proc = zuno(workspace, env, "run", "What is in diagram.png?", "--model", "openai:fake")
    assert proc.returncode == 0, proc.stderr
    assert "A diagram." in proc.stdout
    expected = data_url(picture, "image/png")
    assert openai_image_urls(server.requests[1]) == [expected]
    sid = session_of(proc.stderr)
    (workspace / "diagram.png").unlink()
    server.enqueue(Reply(text="Still a diagram."))
    proc = zuno(workspace, env, "resume", sid, "Look again.", "--model", "openai:fake")
    assert proc.returncode == 0, proc.stderr
    assert "Still a diagram." in proc.stdout
    assert openai_image_urls(server.requests[2]) == [expected]


# --- long conversations, lost artifacts, MCP images -------------------------------


@pytest.mark.anyio
async def test_only_the_newest_twenty_images_go_with_a_request(
    workspace: Path, server: FakeModelServer
) -> None:
    names = [f"frame{i:02}.png" for i in range(21)]
    for i, name in enumerate(names):
        (workspace / name).write_bytes(png(i + 1, 1))
    calls = [read_call(f"c{i}", name) for i, name in enumerate(names)]
    server.enqueue(Reply(tool_calls=calls), Reply(text="Seen."))
    outcome = await turn(runtime(workspace, server, "anthropic"), "Look at them.")
    assert outcome.answered, outcome.message
    results = anthropic_results(server.requests[1])
    assert image_blocks(results["c0"]) == []
    assert "newest 20 images" in text_of(results["c0"]) and "read it again" in text_of(
        results["c0"]
    )
    for i in range(1, 21):
        (block,) = image_blocks(results[f"c{i}"])
        assert base64.b64decode(block["source"]["data"]) == png(i + 1, 1)


def take_file(path: str) -> bytes:
    """The file's bytes; the file is deleted."""
    gone = Path(path)
    data = gone.read_bytes()
    gone.unlink()
    return data


@pytest.mark.anyio
async def test_an_image_whose_artifact_is_gone_is_named_in_words_on_resume(
    workspace: Path, server: FakeModelServer
) -> None:
    (workspace / "shot.png").write_bytes(png(6, 6))
    server.enqueue(Reply(tool_calls=[read_call("c1", "shot.png")]), Reply(text="Seen."))
    rt = runtime(workspace, server, "openai")
    first = await turn(rt, "Look at it.")
    assert first.answered, first.message
    (row,) = rt.store.calls(first.session_id)
    assert row.artifact is not None and take_file(row.artifact) == png(6, 6)
    server.enqueue(Reply(text="Gone."))
    second = await turn(runtime(workspace, server, "openai"), "Again?", first.session_id)
    assert second.answered, second.message
    request = server.requests[2]
    assert openai_image_urls(request) == []
    tool = next(m for m in request.body["messages"] if m["role"] == "tool")
    assert "PNG image, 6x6" in tool["content"] and "saved copy is gone" in tool["content"]


@pytest.mark.anyio
async def test_an_image_from_an_mcp_tool_reaches_the_model_as_an_image(
    workspace: Path, tmp_path: Path, server: FakeModelServer
) -> None:
    fault = Path(__file__).parents[1] / "mcp" / "mcp_fault_server.py"
    sys.path.insert(0, str(fault.parent))
    from mcp_fault_server import PNG  # pyright: ignore[reportMissingImports]

    marks = tmp_path / "marks"
    marks.mkdir()
    mcp = {
        "servers": {
            "f": {
                "command": sys.executable,
                "args": [str(fault)],
                "env": {"FAULT_MARKS": str(marks)},
                "sandbox": False,  # the test server writes its marks outside the workspace
            }
        }
    }
    server.enqueue(Reply(tool_calls=[("c1", "mcp__f__rich", '{"tag": "t"}')]), Reply(text="Seen."))
    outcome = await turn(runtime(workspace, server, "anthropic", mcp=mcp), "Use it.")
    assert outcome.answered, outcome.message
    result = anthropic_results(server.requests[1])["c1"]
    (block,) = image_blocks(result)  # the audio clip stays a line of text
    assert block["source"]["media_type"] == "image/png"
    assert base64.b64decode(block["source"]["data"]) == PNG
    assert "[audio: audio/wav" in text_of(result)


@pytest.mark.anyio
async def test_an_image_read_before_a_crash_is_sent_when_its_result_is_settled_from_sql(
    workspace: Path, server: FakeModelServer
) -> None:
    """The reply and the read's row were stored, the result message was not: resume."""
    from zuno.agent.messages import AssistantMessage, ToolCallRequest
    from zuno.dispatch.dispatcher import CallRequest

    (workspace / "shot.png").write_bytes(png(9, 4))
    rt = runtime(workspace, server, "anthropic")
    state = rt.open_session(agent="build", model=MODEL)
    sid = state.session_id
    rt.store.append_message(sid, "user", {"role": "user", "text": "look"})
    call = ToolCallRequest(id="m1", name="read", arguments='{"path": "shot.png"}')
    reply = AssistantMessage(tool_calls=(call,))
    rt.store.append_message(
        sid, "assistant", {**reply.model_dump(mode="json"), "zuno": {"step": 1}}
    )
    async with rt:
        await rt.dispatch(state, [CallRequest("read", call.arguments, "m1")])
    rt.release()
    rt.close()
    server.enqueue(Reply(text="A small grey box."))
    outcome = await turn(runtime(workspace, server, "anthropic"), None, sid)
    assert outcome.answered, outcome.message
    result = anthropic_results(server.requests[0])["m1"]
    assert "PNG image, 9x4" in text_of(result)
    (block,) = image_blocks(result)
    assert base64.b64decode(block["source"]["data"]) == png(9, 4)


@pytest.mark.anyio
async def test_zuno_mcp_serve_answers_a_read_of_an_image_with_image_content(
    workspace: Path, tmp_path: Path
) -> None:
    import mcp_types as types
    from mcp.client.client import Client
    from mcp.client.stdio import StdioServerParameters

    picture = webp(30, 20)
    (workspace / "icon.webp").write_bytes(picture)
    params = StdioServerParameters(
        command=str(ZUNO),
        args=["mcp", "serve", "-w", str(workspace)],
        env={
            "ZUNO_CONFIG_HOME": os.environ["ZUNO_CONFIG_HOME"],
            "ZUNO_DB": str(tmp_path / "serve.db"),
        },
    )
    async with Client(params) as client:
        result = await client.call_tool("read", {"path": "icon.webp"})
    assert not result.is_error
    texts = [b.text for b in result.content if isinstance(b, types.TextContent)]
    images = [b for b in result.content if isinstance(b, types.ImageContent)]
    assert "WebP image, 30x20" in texts[0]
    (image,) = images
    assert image.mime_type == "image/webp" and base64.b64decode(image.data) == picture
