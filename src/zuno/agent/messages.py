"""The conversation, in terms no provider owns.

The agent loop keeps its history as these types and a provider translates
them to and from its wire format. One model step looks like this::

    UserMessage("fix the test")
    AssistantMessage(text="Reading it.", tool_calls=[c1, c2])   # one dispatch batch
    ToolResultMessage(call_id=c1.id, ...)                       # in call order
    ToolResultMessage(call_id=c2.id, ...)
    AssistantMessage(text="Done.")

A :class:`ToolCallRequest` keeps the model's argument text exactly as it came
(``arguments`` is raw JSON text, possibly malformed) and its tool name exactly
as given (possibly unknown). Judging either is the dispatcher's job: a bad call
is ``blocked`` there like any other, so a provider never repairs or drops one.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from zuno.contract.images import ImageAttachment
from zuno.contract.usage import Usage

__all__ = [
    "META_KEY",
    "AssistantMessage",
    "Message",
    "ModelReply",
    "StopReason",
    "ToolCallRequest",
    "ToolResultMessage",
    "ToolSpec",
    "UserMessage",
    "stored_messages",
]


class _Frozen(BaseModel):
    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class ToolCallRequest(_Frozen):
    """One tool call as the model asked for it.

    Attributes:
        id: The provider's call id; the matching result must carry it back.
        name: The tool name exactly as the model wrote it (it may not exist).
        arguments: The argument object as raw JSON text, exactly as the model
            produced it. It may be malformed; it is never parsed here.
    """

    id: str
    name: str
    arguments: str


class UserMessage(_Frozen):
    """What the person (or the parent agent) said."""

    role: Literal["user"] = "user"
    text: str


class AssistantMessage(_Frozen):
    """What the model said in one step: text, tool calls, or both.

    The tool calls of one message are one dispatch batch, in the model's order.
    """

    role: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()


class ToolResultMessage(_Frozen):
    """The model-visible result of one call, answering ``call_id``.

    Attributes:
        call_id: The id of the :class:`ToolCallRequest` this answers.
        name: The tool name the call used (some APIs want it echoed).
        content: The bounded, model-visible output or error text.
        is_error: Whether the call failed or was blocked.
        images: Images the result carries (``read`` of a PNG). Only their
            artifact paths are stored; a provider reads the bytes when it sends
            them, or says in words that the model cannot see them.
    """

    role: Literal["tool"] = "tool"
    call_id: str
    name: str
    content: str
    is_error: bool = False
    images: tuple[ImageAttachment, ...] = ()


Message = Annotated[
    UserMessage | AssistantMessage | ToolResultMessage,
    Field(discriminator="role"),
]
"""One item of the conversation. The system prompt is passed separately."""


class ToolSpec(_Frozen):
    """A tool as a model sees it.

    Attributes:
        name: The tool name.
        description: What the tool does, for the model.
        parameters: The JSON Schema of the arguments, as produced by the
            tool's pydantic argument model (``$defs`` and ``$ref`` allowed;
            the provider adapts it to what its API accepts).
    """

    name: str
    description: str
    parameters: dict[str, Any]


class StopReason(StrEnum):
    """Why the model stopped, in words common to every provider."""

    END_TURN = "end_turn"
    """The model finished its answer."""
    TOOL_CALLS = "tool_calls"
    """The model wants the tool calls of this reply run."""
    MAX_TOKENS = "max_tokens"
    """The reply was cut off by the output token limit."""
    REFUSAL = "refusal"
    """The provider's content policy stopped the reply."""
    OTHER = "other"
    """Anything else (see ``ModelReply.raw_stop_reason``)."""


class ModelReply(_Frozen):
    """One model reply, fully received.

    Attributes:
        text: All text the model produced, concatenated.
        tool_calls: The tool calls, in the model's order (one dispatch batch).
        stop_reason: Why the model stopped, normalized.
        raw_stop_reason: The provider's own word for it, for logs.
        usage: Token counts, when reported.
    """

    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    stop_reason: StopReason = StopReason.END_TURN
    raw_stop_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)

    def as_message(self) -> AssistantMessage:
        """The reply as a history item, to append before the tool results."""
        return AssistantMessage(text=self.text, tool_calls=self.tool_calls)


# defer_build: the validator is built when a history is first loaded, not at import.
_MESSAGE = TypeAdapter[Message](Message, config=ConfigDict(defer_build=True))

META_KEY = "zuno"
"""The key of the loop's bookkeeping stored beside each message (never sent to a model)."""


class _MessageRows(Protocol):
    def messages(self, session_id: str) -> list[tuple[str, dict[str, Any]]]: ...


def stored_messages(store: _MessageRows, session_id: str) -> list[tuple[Message, dict[str, Any]]]:
    """A session's stored conversation: each message with its bookkeeping (``{}`` if none)."""
    out: list[tuple[Message, dict[str, Any]]] = []
    for _role, body in store.messages(session_id):
        meta: dict[str, Any] = body.pop(META_KEY, None) or {}
        out.append((_MESSAGE.validate_python(body), meta))
    return out
