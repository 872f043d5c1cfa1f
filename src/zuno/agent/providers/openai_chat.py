"""OpenAI-compatible Chat Completions through the ``openai`` SDK.

This speaks to OpenAI itself and to local servers with the same API (Ollama,
vLLM, llama.cpp). Replies are always streamed: text deltas go to ``on_text``
as they arrive, and tool calls are put together from their pieces. A tool
call's name and arguments are kept exactly as the model sent them. A server
that answers with one whole ``chat.completion`` object instead is read by
:func:`whole_reply`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

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
from zuno.agent.providers.schemas import ToolTable, openai_tool
from zuno.agent.providers.streaming import NotAReply, StreamingProvider
from zuno.contract.usage import Usage

__all__ = ["OpenAIChatProvider", "openai_messages", "whole_reply"]

_SDK_ERRORS = SdkErrors(
    connection=(openai.APIConnectionError,), status=openai.APIStatusError, api=openai.APIError
)

# One table per form for the whole process: providers of every session share them.
_TABLES = {
    True: ToolTable(lambda spec: openai_tool(spec, True)),
    False: ToolTable(lambda spec: openai_tool(spec, False)),
}

_FINISH = {
    "stop": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_CALLS,
    "function_call": StopReason.TOOL_CALLS,
    "length": StopReason.MAX_TOKENS,
    "content_filter": StopReason.REFUSAL,
}


def openai_messages(
    system: str, messages: Sequence[Message], *, images: bool = True
) -> list[dict[str, Any]]:
    """The conversation as Chat Completions ``messages``.

    Tool results follow their assistant message one ``tool`` message each, in
    the order they are given (the dispatcher gives them in call order).
    Chat Completions has no error flag for a tool result; the content says it.

    A ``tool`` message carries text only, and the API wants every call of a
    reply answered before anything else is said. So the images of a batch's
    results go in one ``user`` message after its last ``tool`` message: for
    each, a line naming the call it came from, then an ``image_url`` part with
    the bytes as a data URL. With ``images`` false (or an image's artifact
    gone) the tool message ends with a sentence naming the image instead.
    """
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    seen: list[dict[str, Any]] = []  # image parts waiting for the batch's tool messages to end
    plan = ImagePlan.of(messages, images)
    for message in messages:
        if seen and not isinstance(message, ToolResultMessage):
            out.append({"role": "user", "content": list(seen)})
            seen.clear()
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            item: dict[str, Any] = {"role": "assistant", "content": message.text}
            if message.tool_calls:
                # Empty content beside tool calls is sent as null, as OpenAI does itself.
                item["content"] = message.text or None
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in message.tool_calls
                ]
            out.append(item)
        else:
            out.append(_tool_message(message, plan, seen))
    if seen:
        out.append({"role": "user", "content": seen})
    return out


def _tool_message(
    message: ToolResultMessage, plan: ImagePlan, seen: list[dict[str, Any]]
) -> dict[str, Any]:
    """The ``tool`` message of a result; its images are added to ``seen``."""
    sent, words = plan.split(message)
    for image in sent:
        what = f" ({image.source})" if image.source else ""
        seen.append({"type": "text", "text": f"The image from call {message.call_id}{what}:"})
        url = f"data:{image.media_type};base64,{image.data}"
        seen.append({"type": "image_url", "image_url": {"url": url}})
    content = "\n".join(part for part in (message.content, *words) if part)
    return {"role": "tool", "tool_call_id": message.call_id, "content": content}


@dataclass(slots=True)
class _PartialCall:
    id: str
    id_given: bool
    name: str = ""
    arguments: list[str] = field(default_factory=lambda: [])


@dataclass(slots=True)
class _Assembly:
    """One streamed reply being put together."""

    on_text: Callable[[str], None] | None
    text: list[str] = field(default_factory=lambda: [])
    calls: list[_PartialCall] = field(default_factory=lambda: [])
    by_index: dict[int, _PartialCall] = field(default_factory=lambda: {})
    finish: str | None = None
    usage: Usage = field(default_factory=Usage)

    def add(self, chunk: ChatCompletionChunk) -> None:
        if chunk.usage is not None:
            details = chunk.usage.prompt_tokens_details
            self.usage = Usage(
                input_tokens=chunk.usage.prompt_tokens,
                output_tokens=chunk.usage.completion_tokens,
                cached_input_tokens=details.cached_tokens if details is not None else None,
            )
        for choice in chunk.choices:
            if choice.index != 0:
                continue  # n=1 is what is asked for; ignore anything else
            if choice.finish_reason is not None:
                self.finish = choice.finish_reason
            delta = choice.delta
            for piece in (delta.content, delta.refusal):
                if piece:
                    self.text.append(piece)
                    if self.on_text is not None:
                        self.on_text(piece)
            for part in delta.tool_calls or ():
                self._add_call_part(part.index, part.id, part.function)

    def _add_call_part(self, index: int, call_id: str | None, function: Any) -> None:
        slot = self.by_index.get(index)
        # Some compatible servers number every call 0; a new id means a new call.
        if slot is None or (call_id and slot.id_given and slot.id != call_id):
            slot = _PartialCall(id=call_id or f"call_{len(self.calls) + 1}", id_given=bool(call_id))
            self.by_index[index] = slot
            self.calls.append(slot)
        elif call_id and not slot.id_given:
            slot.id, slot.id_given = call_id, True
        if function is not None:
            if function.name:
                slot.name += function.name
            if function.arguments:
                slot.arguments.append(function.arguments)

    def reply(self) -> ModelReply:
        calls = tuple(
            ToolCallRequest(id=c.id, name=c.name, arguments="".join(c.arguments))
            for c in self.calls
        )
        stop = _FINISH.get(self.finish or "stop", StopReason.OTHER)
        if calls and stop is StopReason.END_TURN:
            stop = StopReason.TOOL_CALLS  # local servers often say "stop" beside tool calls
        return ModelReply(
            text="".join(self.text),
            tool_calls=calls,
            stop_reason=stop,
            raw_stop_reason=self.finish,
            usage=self.usage,
        )


def _error_text(body: dict[str, Any]) -> str:
    error: Any = body.get("error")
    if isinstance(error, dict):
        message: Any = cast(dict[str, Any], error).get("message")
        return str(message) if message else json.dumps(error)[:300]
    return str(error)[:300]


def _content_text(content: Any) -> str:
    """A message's ``content``: a string, or (some servers) a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = cast(list[Any], content)
        return "".join(
            str(cast(dict[str, Any], p).get("text") or "")
            for p in parts
            if isinstance(p, dict) and cast(dict[str, Any], p).get("type") in ("text", None)
        )
    return ""


def _argument_text(arguments: Any) -> str:
    # The API sends a string; a few servers send the object itself.
    if isinstance(arguments, str):
        return arguments
    return "" if arguments is None else json.dumps(arguments, ensure_ascii=False)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _details(counts: dict[str, Any]) -> dict[str, Any]:
    details: Any = counts.get("prompt_tokens_details")
    return cast(dict[str, Any], details) if isinstance(details, dict) else {}


def whole_reply(body: Any, on_text: Callable[[str], None] | None = None) -> ModelReply:
    """The reply in a whole ``chat.completion`` object (a server that ignored ``stream``).

    Its text goes to ``on_text`` in one piece; tool calls keep their
    argument text exactly as sent.

    Raises:
        NotAReply: ``body`` is an error object, or not a chat completion.
    """
    if not isinstance(body, dict):
        raise NotAReply(f"that is a JSON {type(body).__name__}, not a chat.completion object")
    obj = cast(dict[str, Any], body)
    if "error" in obj and "choices" not in obj:
        raise NotAReply(f"that object is an error: {_error_text(obj)}")
    choices: Any = obj.get("choices")
    if not isinstance(choices, list) or not choices:
        raise NotAReply("that object is not a chat.completion: it has no choices")
    listed = [cast(dict[str, Any], c) for c in cast(list[Any], choices) if isinstance(c, dict)]
    choice = next((c for c in listed if c.get("index", 0) == 0), None)
    message: Any = choice.get("message") if choice is not None else None
    if choice is None or not isinstance(message, dict):
        raise NotAReply("that object is not a chat.completion: its first choice has no message")
    said = cast(dict[str, Any], message)
    text = _content_text(said.get("content")) + _content_text(said.get("refusal"))
    raw_calls: Any = said.get("tool_calls") or []
    if not raw_calls and isinstance(said.get("function_call"), dict):
        raw_calls = [{"function": said["function_call"]}]  # the legacy single-call form
    calls: list[ToolCallRequest] = []
    for number, raw in enumerate(cast(list[Any], raw_calls) if isinstance(raw_calls, list) else []):
        if not isinstance(raw, dict):
            continue
        entry = cast(dict[str, Any], raw)
        function: Any = entry.get("function")
        fn = cast(dict[str, Any], function) if isinstance(function, dict) else {}
        calls.append(
            ToolCallRequest(
                id=str(entry.get("id") or f"call_{number + 1}"),
                name=str(fn.get("name") or ""),
                arguments=_argument_text(fn.get("arguments")),
            )
        )
    if text and on_text is not None:
        on_text(text)
    finish: Any = choice.get("finish_reason")
    finish_text = finish if isinstance(finish, str) else None
    stop = _FINISH.get(finish_text or "stop", StopReason.OTHER)
    if calls and stop is StopReason.END_TURN:
        stop = StopReason.TOOL_CALLS
    usage: Any = obj.get("usage")
    counts = cast(dict[str, Any], usage) if isinstance(usage, dict) else {}
    return ModelReply(
        text=text,
        tool_calls=tuple(calls),
        stop_reason=stop,
        raw_stop_reason=finish_text,
        usage=Usage(
            input_tokens=_count(counts.get("prompt_tokens")),
            output_tokens=_count(counts.get("completion_tokens")),
            cached_input_tokens=_count(_details(counts).get("cached_tokens")),
        ),
    )


class OpenAIChatProvider(StreamingProvider[ChatCompletionChunk]):
    """A :class:`~zuno.agent.providers.Provider` for Chat Completions.

    Args:
        client: The SDK client, built with ``max_retries=0`` (retries are ours).
        model: The model name sent in each request.
        endpoint: Where requests go, for error messages.
        retry: The retry policy for transport failures, 429 and 5xx.
        strict_tools: Ask for strict mode on tools whose schema allows it.
        max_tokens: An output token limit, or None for the server's default.
        images: Whether the model accepts images (a sentence replaces each when not).
        owns_client: Whether :meth:`aclose` closes ``client`` (False: a
            :class:`~zuno.agent.providers.clients.ClientPool`'s, shared).
    """

    sdk_errors = _SDK_ERRORS

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        endpoint: Endpoint,
        *,
        retry: RetryPolicy | None = None,
        strict_tools: bool = True,
        max_tokens: int | None = None,
        images: bool = True,
        owns_client: bool = True,
    ) -> None:
        super().__init__(model, endpoint, retry)
        self._client = client
        self._owns_client = owns_client
        self._strict_tools = strict_tools
        self._max_tokens = max_tokens
        self._images = images
        self._tools = _TABLES[strict_tools]

    def _request(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self._model,
            "messages": openai_messages(system, messages, images=self._images),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            request["tools"] = self._tools.entries(tools)
        if self._max_tokens is not None:
            request["max_completion_tokens"] = self._max_tokens
        return request

    async def _open(self, request: dict[str, Any]) -> openai.AsyncStream[ChatCompletionChunk]:
        # The request is plain JSON already: posted as the body, it skips the
        # SDK's recursive pass over every message against its TypedDicts (which
        # grew with the conversation, and was most of a fleet worker's time).
        return await self._client.post(
            "/chat/completions",
            body=request,
            cast_to=ChatCompletion,
            options={"security": {"bearer_auth": True}},
            stream=True,
            stream_cls=openai.AsyncStream[ChatCompletionChunk],
        )

    def _assembly(self, on_text: Callable[[str], None]) -> _Assembly:
        return _Assembly(on_text=on_text)

    def _whole(self, body: Any, on_text: Callable[[str], None]) -> ModelReply:
        return whole_reply(body, on_text)

    async def aclose(self) -> None:
        """Close the HTTP connections (a pool's client stays open for the pool's next user)."""
        if self._owns_client:
            await self._client.close()
