"""Anthropic Messages through the ``anthropic`` SDK.

Replies are streamed as raw events (``messages.create(stream=True)``) rather
than through the SDK's stream helper, because the helper parses tool input as
it goes and a model's malformed JSON must reach the dispatcher untouched: the
``input_json_delta`` pieces are joined into the raw argument text. A server
that answers with one whole ``message`` object instead is read by
:func:`whole_reply`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import anthropic
import httpx2
from anthropic.types import RawMessageStreamEvent

from zuno.agent.messages import (
    AssistantMessage,
    Message,
    ModelReply,
    StopReason,
    ToolCallRequest,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from zuno.agent.providers.media import ImagePlan
from zuno.agent.providers.retry import Endpoint, RetryPolicy, SdkErrors
from zuno.agent.providers.schemas import ToolTable, anthropic_tool
from zuno.agent.providers.streaming import NotAReply, StreamingProvider
from zuno.contract.usage import Usage

__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicMessagesProvider", "anthropic_messages", "whole_reply"]

DEFAULT_MAX_TOKENS = 8192
"""The Messages API requires an output limit; this one suits a coding step."""

# One table for the whole process: providers of every session share it.
_TABLE = ToolTable(anthropic_tool)

_SDK_ERRORS = SdkErrors(
    # The SDK does not wrap a connection lost mid-stream; its transport's error escapes.
    connection=(anthropic.APIConnectionError, httpx2.TransportError),
    status=anthropic.APIStatusError,
    api=anthropic.APIError,
)

_STOP = {
    "end_turn": StopReason.END_TURN,
    "stop_sequence": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_CALLS,
    "max_tokens": StopReason.MAX_TOKENS,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "refusal": StopReason.REFUSAL,
}


def _tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as the object the API wants in the history.

    Malformed or non-object arguments (which the dispatcher blocked) are sent
    back as ``{}``: the tool result already tells the model what was wrong,
    and echoing a made-up wrapper could teach it to imitate one.
    """
    try:
        value: Any = json.loads(arguments)
    except ValueError:
        return {}
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def anthropic_messages(messages: Sequence[Message], *, images: bool = True) -> list[dict[str, Any]]:
    """The conversation as Messages API ``messages``.

    The API wants user and assistant turns to alternate, so consecutive
    user-side items (the tool results of one batch, in call order, and any
    user text after them) become the content blocks of one user turn.

    Args:
        messages: The conversation.
        images: Whether the model accepts images. A result's images become
            image blocks inside its ``tool_result``; when false (or when an
            image's artifact is gone) a sentence names each one instead.
    """
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    plan = ImagePlan.of(messages, images)

    def flush() -> None:
        if pending:
            out.append({"role": "user", "content": list(pending)})
            pending.clear()

    for message in messages:
        if isinstance(message, UserMessage):
            pending.append({"type": "text", "text": message.text})
        elif isinstance(message, AssistantMessage):
            flush()
            blocks: list[dict[str, Any]] = []
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            blocks.extend(
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": _tool_input(call.arguments),
                }
                for call in message.tool_calls
            )
            if not blocks:
                # The API refuses an empty turn; an empty reply still happened.
                blocks.append({"type": "text", "text": "(no reply)"})
            out.append({"role": "assistant", "content": blocks})
        else:
            pending.append(
                {
                    "type": "tool_result",
                    "tool_use_id": message.call_id,
                    "content": _result_content(message, plan),
                    "is_error": message.is_error,
                }
            )
    flush()
    return out


def _result_content(message: ToolResultMessage, plan: ImagePlan) -> str | list[dict[str, Any]]:
    """A tool result's content: its text, then its images as blocks (or sentences)."""
    if not message.images:
        return message.content
    sent, words = plan.split(message)
    blocks: list[dict[str, Any]] = [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": image.media_type, "data": image.data},
        }
        for image in sent
    ]
    text = "\n".join(part for part in (message.content, *words) if part)
    if not blocks:
        return text
    # The API refuses an empty text block; an image alone is a valid content.
    return [{"type": "text", "text": text}, *blocks] if text else blocks


@dataclass(slots=True)
class _PartialCall:
    id: str
    name: str
    start_input: Any
    pieces: list[str] = field(default_factory=lambda: [])

    def arguments(self) -> str:
        raw = "".join(self.pieces)
        # A call without arguments may send no input_json_delta at all.
        return raw if raw else json.dumps(self.start_input)


@dataclass(slots=True)
class _Assembly:
    """One streamed reply being put together, block by block."""

    on_text: Callable[[str], None] | None
    text: list[str] = field(default_factory=lambda: [])
    calls: dict[int, _PartialCall] = field(default_factory=lambda: {})
    stop: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None

    def _show(self, piece: str) -> None:
        if piece:
            self.text.append(piece)
            if self.on_text is not None:
                self.on_text(piece)

    def add(self, event: RawMessageStreamEvent) -> None:
        if event.type == "message_start":
            self.input_tokens = event.message.usage.input_tokens
            self.output_tokens = event.message.usage.output_tokens
            self.cached_input_tokens = event.message.usage.cache_read_input_tokens
        elif event.type == "content_block_start":
            block = event.content_block
            if block.type == "text":
                self._show(block.text)
            elif block.type == "tool_use":
                self.calls[event.index] = _PartialCall(block.id, block.name, block.input)
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                self._show(delta.text)
            elif delta.type == "input_json_delta" and event.index in self.calls:
                self.calls[event.index].pieces.append(delta.partial_json)
        elif event.type == "message_delta":
            if event.delta.stop_reason is not None:
                self.stop = event.delta.stop_reason
            self.output_tokens = event.usage.output_tokens
            if event.usage.input_tokens is not None:
                self.input_tokens = event.usage.input_tokens
            if event.usage.cache_read_input_tokens is not None:
                self.cached_input_tokens = event.usage.cache_read_input_tokens

    def reply(self) -> ModelReply:
        calls = tuple(
            ToolCallRequest(id=c.id, name=c.name, arguments=c.arguments())
            for _, c in sorted(self.calls.items())
        )
        stop = _STOP.get(self.stop or "end_turn", StopReason.OTHER)
        return ModelReply(
            text="".join(self.text),
            tool_calls=calls,
            stop_reason=stop,
            raw_stop_reason=self.stop,
            usage=Usage(
                input_tokens=self.input_tokens,
                output_tokens=self.output_tokens,
                cached_input_tokens=self.cached_input_tokens,
            ),
        )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def whole_reply(body: Any, on_text: Callable[[str], None] | None = None) -> ModelReply:
    """The reply in a whole Messages ``message`` object (a server that ignored ``stream``).

    Its text goes to ``on_text`` in one piece; a tool call's ``input`` object
    becomes its argument text. Blocks of other kinds (thinking) are skipped,
    as the stream reader skips them.

    Raises:
        NotAReply: ``body`` is an error object, or not a message.
    """
    if not isinstance(body, dict):
        raise NotAReply(f"that is a JSON {type(body).__name__}, not a Messages API message")
    obj = cast(dict[str, Any], body)
    error: Any = obj.get("error")
    if obj.get("type") == "error" or (error is not None and "content" not in obj):
        said: Any = cast(dict[str, Any], error).get("message") if isinstance(error, dict) else error
        raise NotAReply(f"that object is an error: {said or json.dumps(obj)[:300]}")
    content: Any = obj.get("content")
    if not isinstance(content, list):
        raise NotAReply("that object is not a Messages API message: it has no content list")
    text: list[str] = []
    calls: list[ToolCallRequest] = []
    for raw in cast(list[Any], content):
        if not isinstance(raw, dict):
            continue
        block = cast(dict[str, Any], raw)
        if block.get("type") == "text":
            text.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            calls.append(
                ToolCallRequest(
                    id=str(block.get("id") or f"toolu_{len(calls) + 1}"),
                    name=str(block.get("name") or ""),
                    arguments=json.dumps(block.get("input", {}), ensure_ascii=False),
                )
            )
    joined = "".join(text)
    if joined and on_text is not None:
        on_text(joined)
    raw_stop: Any = obj.get("stop_reason")
    stop_text = raw_stop if isinstance(raw_stop, str) else None
    usage: Any = obj.get("usage")
    counts = cast(dict[str, Any], usage) if isinstance(usage, dict) else {}
    return ModelReply(
        text=joined,
        tool_calls=tuple(calls),
        stop_reason=_STOP.get(stop_text or "end_turn", StopReason.OTHER),
        raw_stop_reason=stop_text,
        usage=Usage(
            input_tokens=_count(counts.get("input_tokens")),
            output_tokens=_count(counts.get("output_tokens")),
            cached_input_tokens=_count(counts.get("cache_read_input_tokens")),
        ),
    )


class AnthropicMessagesProvider(StreamingProvider[RawMessageStreamEvent]):
    """A :class:`~zuno.agent.providers.Provider` for the Messages API.

    Args:
        client: The SDK client, built with ``max_retries=0`` (retries are ours).
        model: The model name sent in each request.
        endpoint: Where requests go, for error messages.
        retry: The retry policy for transport failures, 429 and 5xx.
        max_tokens: The output token limit the API requires.
        images: Whether the model accepts images (a sentence replaces each when not).
        owns_client: Whether :meth:`aclose` closes ``client`` (False: a
            :class:`~zuno.agent.providers.clients.ClientPool`'s, shared).
    """

    sdk_errors = _SDK_ERRORS

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        model: str,
        endpoint: Endpoint,
        *,
        retry: RetryPolicy | None = None,
        max_tokens: int | None = None,
        images: bool = True,
        owns_client: bool = True,
    ) -> None:
        super().__init__(model, endpoint, retry)
        self._client = client
        self._owns_client = owns_client
        self._max_tokens = max_tokens or DEFAULT_MAX_TOKENS
        self._images = images
        self._tools = _TABLE

    def _request(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._max_tokens,
            "messages": anthropic_messages(messages, images=self._images),
            "stream": True,
        }
        if system:
            request["system"] = system
        if tools:
            request["tools"] = self._tools.entries(tools)
        return request

    async def _open(self, request: dict[str, Any]) -> anthropic.AsyncStream[RawMessageStreamEvent]:
        # Parameters are plain dicts; the SDK's TypedDict overloads cannot
        # be selected from a dict, hence the cast.
        create = cast(Any, self._client.messages.create)
        return await create(**request)

    def _assembly(self, on_text: Callable[[str], None]) -> _Assembly:
        return _Assembly(on_text=on_text)

    def _whole(self, body: Any, on_text: Callable[[str], None]) -> ModelReply:
        return whole_reply(body, on_text)

    async def aclose(self) -> None:
        """Close the HTTP connections (a pool's client stays open for the pool's next user)."""
        if self._owns_client:
            await self._client.close()
