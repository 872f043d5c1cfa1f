"""A scripted OpenAI-compatible model server for fleets: every session plays its own script.

Any worker may send any session's next request, and a session may move from
one worker to another halfway, so the reply is decided by the conversation in
the request alone, never by the order requests arrive in. The prompt names the
task (``fleet task 07 (marks in marks/)``); the script of a task is:

1. a ``shell`` call (SideEffecting, Never) that waits ``delay`` seconds and then
   appends one line to ``marks/07-1.txt``;
2. the same for ``marks/07-2.txt``;
3. the answer ``task 07 done``.

A prompt with ``fleet broken`` gets an HTTP 400 error (a model error, never retried).

A user message after the prompt is a recovery notice (a call's outcome is
uncertain): the model answers it first with a ``read`` of the marks folder (an
inspection), as a careful model would, then goes on with its script.

Each line on disk is one run of a call: a call that ran twice leaves two.
Every request is kept (``requests``) so a test can check what the model was told.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = ["CALLS_PER_TASK", "FleetModelServer", "marker", "prompt_for"]

CALLS_PER_TASK = 2
_TASK = re.compile(r"fleet task (\d+)")


def prompt_for(task: int) -> str:
    """The prompt that makes a session play task ``task``'s script."""
    return f"fleet task {task:02d} (marks in marks/)"


def marker(task: int, call: int) -> str:
    """The workspace-relative file that call ``call`` (1-based) of task ``task`` appends to."""
    return f"marks/{task:02d}-{call}.txt"


@dataclass
class FleetModelServer:
    """Chat Completions on 127.0.0.1 (streamed), replying from each session's script.

    Args:
        delay: Seconds each shell call sleeps before it writes its line (a
            window in which a worker can be killed mid-call).
    """

    delay: float = 0.4
    requests: list[dict[str, Any]] = field(default_factory=lambda: [], init=False)
    client_ports: list[int] = field(default_factory=lambda: [], init=False)
    """The client's port of each request: one port is one connection, kept alive."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _httpd: ThreadingHTTPServer | None = field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    @property
    def openai_base_url(self) -> str:
        assert self._httpd is not None, "start the server first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> Self:
        outer = self

        class Handler(_Handler):
            server_state = outer

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def reply_for(self, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, str]]]:
        """The next (text, tool calls) of the conversation ``messages``."""
        users = [m for m in messages if m.get("role") == "user"]
        found = _TASK.search(_text(users[0])) if users else None
        if found is None:
            return "I have no task.", []
        task = int(found.group(1))
        last = messages[-1]
        if last.get("role") == "user" and last is not users[0]:
            # A recovery notice: look at the real state before going on.
            n = len(users)
            return "Checking what happened.", [
                _call(f"insp_{task:02d}_{n}", "read", {"path": "marks"})
            ]
        done = sum(
            1
            for m in messages
            if m.get("role") == "tool" and str(m.get("tool_call_id", "")).startswith("sh_")
        )
        if done < CALLS_PER_TASK:
            k = done + 1
            command = f"sleep {self.delay}; echo ran >> {marker(task, k)}"
            return f"Step {k}.", [_call(f"sh_{task:02d}_{k}", "shell", {"command": command})]
        return f"task {task:02d} done", []


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))  # pyright: ignore[reportUnknownArgumentType,reportUnknownMemberType,reportUnknownVariableType]
    return ""


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, str]:
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments)}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30
    server_state: FleetModelServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body: dict[str, Any] = json.loads(self.rfile.read(int(self.headers["content-length"])))
        state = self.server_state
        with state._lock:  # pyright: ignore[reportPrivateUsage]
            state.requests.append(body)
            state.client_ports.append(int(self.client_address[1]))
        messages: list[dict[str, Any]] = list(body.get("messages") or [])
        if "fleet broken" in json.dumps(messages):
            self._send_error(400, "fleet model: this task is broken on purpose")
            return
        text, calls = state.reply_for(messages)
        model = str(body.get("model", "fake"))
        if not body.get("stream"):
            self._send_json(text, calls, model)
            return
        frames = [f"data: {json.dumps(chunk)}\n\n" for chunk in _chunks(text, calls, model)]
        frames.append("data: [DONE]\n\n")
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for frame in frames:
            data = frame.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send_error(self, status: int, message: str) -> None:
        data = json.dumps(
            {"error": {"message": message, "type": "invalid_request_error", "code": None}}
        ).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_json(self, text: str, calls: list[dict[str, str]], model: str) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls
            ]
        data = json.dumps(
            {
                "id": "chatcmpl-fleet",
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if calls else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _chunks(text: str, calls: list[dict[str, str]], model: str) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-fleet", "object": "chat.completion.chunk", "created": 0, "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""}), chunk({"content": text})]
    for index, call in enumerate(calls):
        head = {"index": index, "id": call["id"], "type": "function"}
        out.append(
            chunk({"tool_calls": [{**head, "function": {"name": call["name"], "arguments": ""}}]})
        )
        out.append(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": call["arguments"]}}]})
        )
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    out.append({**base, "choices": [], "usage": usage})
    return out
