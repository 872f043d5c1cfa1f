"""A server that answers a streaming request with one whole JSON reply.

Some proxies ignore ``"stream": true``. The reply and its tool calls must be
used (text shown, calls dispatched) or, when the body is not a reply at all,
refused with a clear error and a non-zero exit: never an empty answer.
Everything runs through the real ``zuno run`` against a real local server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from fake_api import Reply
from whole_reply_api import RawBody, Whole, WholeReplyServer

ZUNO = [sys.executable, "-m", "zuno"]
Kind = Literal["openai", "anthropic"]
MODELS: dict[Kind, str] = {"openai": "openai:fake-model", "anthropic": "anthropic:fake-claude"}


@pytest.fixture
def whole_server() -> Iterator[WholeReplyServer]:
    with WholeReplyServer() as server:
        yield server


def _env(server: WholeReplyServer, db: Path) -> dict[str, str]:
    return {
        **os.environ,
        "ZUNO_DB": str(db),
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": "sk-test",
        "ANTHROPIC_BASE_URL": server.anthropic_base_url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
    }


def _zuno(workspace: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ZUNO, *args],
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _tool_results(kind: Kind, body: dict[str, Any]) -> list[tuple[str, str]]:
    """(call id, content) of every tool result the request sent back to the model."""
    out: list[tuple[str, str]] = []
    for message in body["messages"]:
        if kind == "openai" and message["role"] == "tool":
            out.append((message["tool_call_id"], message["content"]))
        elif kind == "anthropic" and isinstance(message["content"], list):
            out += [
                (block["tool_use_id"], str(block["content"]))
                for block in message["content"]
                if block.get("type") == "tool_result"
            ]
    return out


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_whole_reply_is_used_text_and_tool_calls(
    kind: Kind, workspace: Path, tmp_path: Path, whole_server: WholeReplyServer
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    whole_server.enqueue(
        Whole(Reply(text="Reading it.", tool_calls=[("t1", "read", '{"path": "a.txt"}')])),  # type: ignore[arg-type]
        Whole(Reply(text="It says alpha.")),  # type: ignore[arg-type]
    )
    env = _env(whole_server, tmp_path / "z.db")
    proc = _zuno(workspace, env, "run", "what is in a.txt?", "--model", MODELS[kind])
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Reading it." in proc.stdout and "It says alpha." in proc.stdout
    requests = whole_server.requests
    assert len(requests) == 2 and all(r.body.get("stream") is True for r in requests)
    # The read really ran, and its result went back to the model under the model's id.
    ((call_id, content),) = _tool_results(kind, requests[1].body)
    assert call_id == "t1" and "alpha" in content
    # And the store says so.
    sid = next(w for w in proc.stderr.split() if w.startswith("ses_"))
    shown = json.loads(_zuno(workspace, env, "show", sid, "--json").stdout)
    assert [(c["tool"], c["outcome"]) for c in shown["calls"]] == [("read", "ok")]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("content_type", "body", "said"),
    [
        ("application/json", b'{"unexpected": true}', "not a"),
        ("application/json", b"{truncated", "not JSON"),
        ("text/html", b"<html><body>Please log in</body></html>", "text/html"),
        ("text/event-stream", b"", "no reply"),
    ],
    ids=["wrong-object", "bad-json", "html-page", "empty-stream"],
)
def test_a_body_that_is_no_reply_is_a_clear_error(
    kind: Kind,
    content_type: str,
    body: bytes,
    said: str,
    workspace: Path,
    tmp_path: Path,
    whole_server: WholeReplyServer,
) -> None:
    whole_server.enqueue(RawBody(content_type, body))  # type: ignore[arg-type]
    env = _env(whole_server, tmp_path / "z.db")
    proc = _zuno(workspace, env, "run", "hello", "--model", MODELS[kind])
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert said in proc.stderr, proc.stderr
    assert "done" not in proc.stderr
    # Not retried: the same body would come back, and the request costs money.
    assert len(whole_server.requests) == 1


def test_an_error_object_in_a_200_reply_says_what_the_server_said(
    workspace: Path, tmp_path: Path, whole_server: WholeReplyServer
) -> None:
    error = {"error": {"message": "model overloaded, try later", "type": "server_error"}}
    whole_server.enqueue(RawBody("application/json", json.dumps(error).encode()))  # type: ignore[arg-type]
    env = _env(whole_server, tmp_path / "z.db")
    proc = _zuno(workspace, env, "run", "hello", "--model", MODELS["openai"])
    assert proc.returncode == 1
    assert "model overloaded, try later" in proc.stderr


def test_the_error_line_is_printed_as_the_provider_wrote_it(
    workspace: Path, tmp_path: Path, whole_server: WholeReplyServer
) -> None:
    # Neither rich markup ("[busy]") nor emoji codes (":m:" in "openai:m: ...") may eat words.
    error = {"error": {"message": "[busy] the model is overloaded", "type": "server_error"}}
    whole_server.enqueue(RawBody("application/json", json.dumps(error).encode()))  # type: ignore[arg-type]
    env = _env(whole_server, tmp_path / "z.db")
    proc = _zuno(workspace, env, "run", "hello", "--model", "openai:m")
    assert proc.returncode == 1
    assert "zuno: openai:m: " in proc.stderr, proc.stderr
    assert "[busy] the model is overloaded" in proc.stderr


# -- through the Python API: the shapes compatible servers really send -------------------


def _provider(kind: Kind, server: WholeReplyServer) -> Any:
    from zuno.agent.providers import make_provider

    url = server.openai_base_url if kind == "openai" else server.anthropic_base_url
    return make_provider(f"p:{kind}-model", {"p": {"kind": kind, "base_url": url, "attempts": 1}})


async def _complete(provider: Any, shown: list[str]) -> Any:
    from zuno.agent.messages import UserMessage

    try:
        return await provider.complete("", [UserMessage(text="hi")], [], shown.append)
    finally:
        await provider.aclose()


@pytest.mark.anyio
async def test_openai_variants_text_parts_object_arguments_legacy_call(
    whole_server: WholeReplyServer,
) -> None:
    parts = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",  # local servers say stop beside tool calls
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Two "},
                        {"type": "text", "text": "parts"},
                    ],
                    "tool_calls": [
                        {"id": "a", "function": {"name": "read", "arguments": {"path": "x"}}},
                        {"function": {"name": "glob", "arguments": '{"pattern": "*"'}},
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3},
    }
    legacy = {
        "choices": [
            {"message": {"content": None, "function_call": {"name": "grep", "arguments": "{}"}}}
        ]
    }
    whole_server.enqueue(
        RawBody("application/json; charset=utf-8", json.dumps(parts).encode()),  # type: ignore[arg-type]
        RawBody("application/json", json.dumps(legacy).encode()),  # type: ignore[arg-type]
    )
    shown: list[str] = []
    reply = await _complete(_provider("openai", whole_server), shown)
    assert reply.text == "Two parts" and shown == ["Two parts"]
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("a", "read", '{"path": "x"}'),
        ("call_2", "glob", '{"pattern": "*"'),  # malformed text kept as sent
    ]
    assert reply.stop_reason.value == "tool_calls"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (5, 3)
    second = await _complete(_provider("openai", whole_server), [])
    assert [(c.name, c.arguments) for c in second.tool_calls] == [("grep", "{}")]


@pytest.mark.anyio
async def test_anthropic_whole_message_skips_thinking_and_keeps_input(
    whole_server: WholeReplyServer,
) -> None:
    message = {
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "tu1", "name": "read", "input": {"path": "a.txt"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 9, "output_tokens": 4},
    }
    whole_server.enqueue(RawBody("application/json", json.dumps(message).encode()))  # type: ignore[arg-type]
    shown: list[str] = []
    reply = await _complete(_provider("anthropic", whole_server), shown)
    assert reply.text == "Reading." and shown == ["Reading."]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("tu1", "read", {"path": "a.txt"})
    ]
    assert reply.stop_reason.value == "tool_calls"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (9, 4)
