"""What both SDK providers share: stream one reply, retrying while nothing showed.

Each provider says how to build its request, how to open the SDK's stream and
how to put the streamed events together into a reply;
:class:`StreamingProvider` does the rest: the text callback, the attempt loop
(:func:`~zuno.agent.providers.retry.request_with_retries`) and the label.

Every request asks for a stream, but some servers and proxies ignore that and
send the whole reply as one JSON object. The SDKs would read such a body as an
event stream with no events, an empty reply that silently drops the model's
text and tool calls. So the content type is looked at first: a JSON body is
read whole by the provider (:meth:`StreamingProvider._whole`), and a body that
is neither a reply nor a stream with events is an
:class:`~zuno.agent.providers.errors.UnreadableReply`, never an empty answer.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from zuno.agent.messages import Message, ModelReply, ToolSpec
from zuno.agent.providers.errors import UnreadableReply
from zuno.agent.providers.retry import Endpoint, RetryPolicy, SdkErrors, request_with_retries
from zuno.core.sentences import full_stop

__all__ = ["NotAReply", "ReplyAssembly", "SdkStream", "StreamingProvider"]

E = TypeVar("E")
E_contra = TypeVar("E_contra", contravariant=True)
E_co = TypeVar("E_co", covariant=True)


class ReplyAssembly(Protocol[E_contra]):
    """One streamed reply being put together from an SDK's events."""

    def add(self, event: E_contra, /) -> None:
        """Take in the next event of the stream."""
        ...

    def reply(self) -> ModelReply:
        """The whole reply, once the stream has ended."""
        ...


class NotAReply(Exception):
    """Raised by :meth:`StreamingProvider._whole`: the JSON body is not a reply (says why)."""


class HttpResponse(Protocol):
    """The HTTP response under an SDK stream (both SDKs expose it as ``.response``)."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def aread(self) -> bytes: ...


class SdkStream(Protocol[E_co]):
    """An SDK's open response stream: closed on exit, iterated for its events."""

    @property
    def response(self) -> HttpResponse: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        exc_tb: TracebackType | None,
        /,
    ) -> Any: ...

    def __aiter__(self) -> AsyncIterator[E_co]: ...


class StreamingProvider(ABC, Generic[E]):
    """A :class:`~zuno.agent.providers.Provider` whose replies arrive as events.

    Args:
        model: The model name sent in each request.
        endpoint: Where requests go, for error messages.
        retry: The retry policy for transport failures, 429 and 5xx.
    """

    sdk_errors: ClassVar[SdkErrors]
    """The exception classes the provider's SDK raises."""

    def __init__(self, model: str, endpoint: Endpoint, retry: RetryPolicy | None) -> None:
        self._model = model
        self._endpoint = endpoint
        self._retry = retry or RetryPolicy()

    @property
    def label(self) -> str:
        """``provider:model``, as named on the command line."""
        return self._endpoint.label

    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        """Send the conversation and stream back one reply.

        See :meth:`zuno.agent.providers.Provider.complete`. An attempt that
        fails before any text reached ``on_text`` is retried under the policy.
        """
        request = self._request(system, messages, tools)
        shown = False

        def show(piece: str) -> None:
            nonlocal shown
            shown = True
            if on_text is not None:
                on_text(piece)

        async def attempt() -> ModelReply:
            assembly = self._assembly(show)
            stream = await self._open(request)
            async with stream:
                content_type = stream.response.headers.get("content-type") or ""
                if _is_json(content_type):
                    return self._read_whole(await stream.response.aread(), show)
                events = 0
                async for event in stream:
                    events += 1
                    assembly.add(event)
            if events == 0:
                raise self._unreadable(
                    f"its body ({content_type or 'no content type'}) held no reply: "
                    "no stream events and no JSON reply"
                )
            return assembly.reply()

        return await request_with_retries(
            attempt,
            where=self._endpoint,
            sdk=self.sdk_errors,
            policy=self._retry,
            streamed=lambda: shown,
        )

    def _read_whole(self, body: bytes, on_text: Callable[[str], None]) -> ModelReply:
        """A whole JSON reply sent where a stream was asked for."""
        try:
            value: Any = json.loads(body)
        except ValueError:
            start = body[:80].decode("utf-8", "replace")
            raise self._unreadable(
                f"its body says application/json but is not JSON (it starts {start!r})"
            ) from None
        try:
            return self._whole(value, on_text)
        except NotAReply as exc:
            raise self._unreadable(
                f"it sent one JSON object where a stream was asked for, and {exc}"
            ) from None

    def _unreadable(self, why: str) -> UnreadableReply:
        where = self._endpoint
        return UnreadableReply(
            f"{where.label}: {where.base_url} answered, but {full_stop(why)} "
            f"Check {where.base_url_setting}: "
            "it should be the model API itself, or a proxy that passes its replies through."
        )

    @abstractmethod
    def _whole(self, body: Any, on_text: Callable[[str], None]) -> ModelReply:
        """The reply in a whole JSON body (a server that ignored ``stream``).

        The reply's text goes to ``on_text`` in one piece.

        Raises:
            NotAReply: The body is not a reply of this API (the message says why).
        """

    @abstractmethod
    def _request(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The request's parameters, the same for every attempt."""

    @abstractmethod
    async def _open(self, request: dict[str, Any]) -> SdkStream[E]:
        """Send the request and return the SDK's stream of events."""

    @abstractmethod
    def _assembly(self, on_text: Callable[[str], None]) -> ReplyAssembly[E]:
        """A new, empty reply that passes each text piece to ``on_text``."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release the provider's connections."""


def _is_json(content_type: str) -> bool:
    """Whether a ``Content-Type`` names JSON (``application/json``, ``...+json``)."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")
