"""A real HTTP model server on 127.0.0.1 that plays scripted replies.

It speaks both APIs the providers use, streamed (SSE) and not:

- OpenAI Chat Completions: ``POST /v1/chat/completions``
  (point the SDK at :attr:`FakeModelServer.openai_base_url`);
- Anthropic Messages: ``POST /v1/messages``
  (point the SDK at :attr:`FakeModelServer.anthropic_base_url`).

Every request takes the next item of the script, whichever API it came in on
(a request refused for its key takes none), and every request is recorded, so
a test can assert what was sent (the tool schemas, tool results in call order)::

    from fake_api import Failure, FakeModelServer, Reply

    script = [
        Failure(500),                                   # the first request fails
        Reply(text="Reading.", tool_calls=[("call_1", "read", '{"path": "a"}')]),
        Reply(text="Done."),
    ]
    with FakeModelServer(script, api_key="sk-test") as server:
        provider = make_provider(
            "local:fake", {"local": {"kind": "openai", "base_url": server.openai_base_url,
                                      "api_key_env": "FAKE_KEY"}},
            environ={"FAKE_KEY": "sk-test"},
        )
        ...
        assert server.requests[1].body["messages"][-1]["role"] == "user"

Tool call arguments are sent exactly as scripted, so a script can hold
malformed JSON or unknown tool names. When the script runs out the server
answers 400 with a message saying so (400 is never retried, so the test fails
at once rather than waiting through backoff).

The server is the standard library's ``ThreadingHTTPServer`` (HTTP/1.1 with
keep-alive; streams are sent chunked, one SSE frame per chunk) in a daemon
thread on a free port; ``with`` starts it and stops it, in milliseconds.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self

__all__ = ["Failure", "FakeModelServer", "RecordedRequest", "Reply", "ToolCall", "free_port"]

Api = Literal["openai", "anthropic"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A scripted tool call; ``arguments`` is sent verbatim (it may be malformed)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted model reply.

    Attributes:
        text: The reply's text (streamed in pieces of ``chunk_size`` characters).
        tool_calls: ``ToolCall`` or ``(id, name, raw_arguments)`` tuples, in order.
        stop_reason: The API's own stop word; by default ``tool_calls`` /
            ``tool_use`` when there are calls, else ``stop`` / ``end_turn``.
        chunk_size: Characters per streamed text or argument delta.
        input_tokens: Reported prompt tokens.
        output_tokens: Reported completion tokens.
        cut_after: Drop the connection after this many streamed deltas (a
            connection lost mid-reply); None streams the whole reply.
        cached_tokens: Reported prompt tokens read from the cache (None: not reported).
    """

    text: str = ""
    tool_calls: Sequence[ToolCall | tuple[str, str, str]] = ()
    stop_reason: str | None = None
    chunk_size: int = 4
    input_tokens: int = 11
    output_tokens: int = 7
    cut_after: int | None = None
    cached_tokens: int | None = None

    def calls(self) -> list[ToolCall]:
        """The tool calls as :class:`ToolCall` objects."""
        return [c if isinstance(c, ToolCall) else ToolCall(*c) for c in self.tool_calls]


@dataclass(frozen=True, slots=True)
class Failure:
    """A scripted error answer (consumes one script item, like a reply).

    Attributes:
        status: The HTTP status (500, 429, 401, ...).
        message: The error message, in the API's error body.
        retry_after: Sent as the ``retry-after`` header (seconds) when set.
    """

    status: int = 500
    message: str = "injected failure"
    retry_after: float | None = None


ScriptItem = Reply | Failure


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the server received it."""

    api: Api
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    client_port: int = 0
    """The client's port: requests over one kept-alive connection share it."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for unreachable tests)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), max(1, size))]


def _openai_stream(reply: Reply, model: str, usage: bool) -> list[str]:
    """The ``data:`` payloads of a Chat Completions stream, in order."""
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return json.dumps({**base, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in _pieces(reply.text, reply.chunk_size)]
    for index, call in enumerate(reply.calls()):
        function = {"name": call.name, "arguments": ""}
        head: dict[str, Any] = {"index": index, "id": call.id, "type": "function"}
        head["function"] = function
        events.append(chunk({"tool_calls": [head]}))
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
            for p in _pieces(call.arguments, reply.chunk_size)
        ]
    finish = reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")
    events.append(chunk({}, finish))
    if usage:
        counts: dict[str, Any] = {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        }
        if reply.cached_tokens is not None:
            counts["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
        events.append(json.dumps({**base, "choices": [], "usage": counts}))
    return events


def _openai_message(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.calls()
        ]
    finish = reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        },
    }


def _anthropic_stream(reply: Reply, model: str) -> list[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` pairs of a Messages stream, in order."""
    start: dict[str, Any] = {**_anthropic_message(reply, model), "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": reply.input_tokens, "output_tokens": 1}
    if reply.cached_tokens is not None:
        start["usage"]["cache_read_input_tokens"] = reply.cached_tokens
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": start})]
    events.append(("ping", {}))
    index = 0
    if reply.text:
        block: dict[str, Any] = {"type": "text", "text": ""}
        events.append(("content_block_start", {"index": index, "content_block": block}))
        for piece in _pieces(reply.text, reply.chunk_size):
            delta = {"type": "text_delta", "text": piece}
            events.append(("content_block_delta", {"index": index, "delta": delta}))
        events.append(("content_block_stop", {"index": index}))
        index += 1
    for call in reply.calls():
        block: dict[str, Any] = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        events.append(("content_block_start", {"index": index, "content_block": block}))
        for piece in _pieces(call.arguments, reply.chunk_size):
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append(("content_block_delta", {"index": index, "delta": delta}))
        events.append(("content_block_stop", {"index": index}))
        index += 1
    stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
    events.append(
        (
            "message_delta",
            {
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": reply.output_tokens},
            },
        )
    )
    events.append(("message_stop", {}))
    return [(name, {"type": name, **data}) for name, data in events]


def _anthropic_message(reply: Reply, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for call in reply.calls():
        try:
            parsed: Any = json.loads(call.arguments or "{}")
        except ValueError:
            parsed = {}  # a non-streamed reply must carry an object; streams stay raw
        content.append({"type": "tool_use", "id": call.id, "name": call.name, "input": parsed})
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }


def _error_body(api: Api, message: str) -> dict[str, Any]:
    if api == "openai":
        return {"error": {"message": message, "type": "fake_error", "param": None, "code": None}}
    return {"type": "error", "error": {"type": "api_error", "message": message}}


@dataclass
class FakeModelServer:
    """A scripted Chat Completions + Messages server; see the module docstring.

    Args:
        script: The replies and failures, consumed one per request.
        api_key: When set, requests must carry it (``Authorization: Bearer``
            or ``x-api-key``); others get 401.
    """

    script: Iterable[ScriptItem] = ()
    api_key: str | None = None
    _queue: list[ScriptItem] = field(init=False, repr=False)
    _requests: list[RecordedRequest] = field(init=False, repr=False, default_factory=lambda: [])
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)
    _httpd: ThreadingHTTPServer | None = field(init=False, repr=False, default=None)
    _thread: threading.Thread | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._queue = list(self.script)

    # -- the public surface ---------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        if self._httpd is None:
            raise RuntimeError("FakeModelServer is not running; use it in a with block")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def openai_base_url(self) -> str:
        """The base URL for the OpenAI SDK (``.../v1``)."""
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The base URL for the Anthropic SDK (it adds ``/v1/messages`` itself)."""
        return self.base_url

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def remaining(self) -> int:
        """Script items not yet consumed."""
        with self._lock:
            return len(self._queue)

    def enqueue(self, *items: ScriptItem) -> None:
        """Append items to the script (also while running)."""
        with self._lock:
            self._queue.extend(items)

    def start(self) -> Self:
        """Start serving on a free port of 127.0.0.1; it accepts connections on return."""
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="fake-model-api",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- serving --------------------------------------------------------------

    def _authorized(self, api: Api, headers: dict[str, str]) -> bool:
        if self.api_key is None:
            return True
        bearer = headers.get("authorization") == f"Bearer {self.api_key}"
        if api == "openai":
            return bearer
        return bearer or headers.get("x-api-key") == self.api_key

    def _take(self, record: RecordedRequest) -> tuple[bool, ScriptItem | None, int]:
        authorized = self._authorized(record.api, record.headers)
        with self._lock:
            self._requests.append(record)
            # A refused key gets no reply, so it leaves the script where it was.
            item = self._queue.pop(0) if self._queue and authorized else None
            return authorized, item, len(self._requests)


_ROUTES: dict[str, Api] = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}


def _handler_for(server: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        fake = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and chunked streams, as real APIs do
    timeout = 30  # an idle keep-alive connection's thread ends eventually
    fake: FakeModelServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests assert on recorded requests instead

    def do_POST(self) -> None:
        api = _ROUTES.get(self.path.split("?", 1)[0])
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if api is None:
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        body: dict[str, Any] = json.loads(raw or b"{}")
        headers = {k.lower(): v for k, v in self.headers.items()}
        authorized, item, served = self.fake._take(  # pyright: ignore[reportPrivateUsage]
            RecordedRequest(api, self.path, headers, body, int(self.client_address[1]))
        )
        if not authorized:
            self._json(401, _error_body(api, "invalid api key (FakeModelServer)"))
        elif item is None:
            message = f"FakeModelServer: script exhausted at request {served}"
            self._json(400, _error_body(api, message))
        elif isinstance(item, Failure):
            extra = {} if item.retry_after is None else {"retry-after": str(item.retry_after)}
            self._json(item.status, _error_body(api, item.message), extra)
        elif not body.get("stream"):
            model = str(body.get("model", "fake-model"))
            answer = _openai_message(item, model) if api == "openai" else None
            self._json(200, answer or _anthropic_message(item, model))
        else:
            self._stream(api, item, body)

    def _json(self, status: int, body: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, api: Api, reply: Reply, body: dict[str, Any]) -> None:
        model = str(body.get("model", "fake-model"))
        if api == "openai":
            options: dict[str, Any] = body.get("stream_options") or {}
            usage = bool(options.get("include_usage"))
            frames = [f"data: {data}\n\n" for data in _openai_stream(reply, model, usage)]
            frames.append("data: [DONE]\n\n")
        else:
            frames = [
                f"event: {name}\ndata: {json.dumps(data)}\n\n"
                for name, data in _anthropic_stream(reply, model)
            ]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for number, frame in enumerate(frames):
            if reply.cut_after is not None and number > reply.cut_after:
                # Leave the chunked body unfinished and hang up: a connection lost mid-reply.
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            data = frame.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()  # one frame per write, as a real server streams
        self.wfile.write(b"0\r\n\r\n")
