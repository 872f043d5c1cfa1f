"""What both SDK providers share: stream one reply, retrying while nothing showed.

Each provider says how to build its request, how to open the SDK's stream and
how to put the streamed events together into a reply;
:class:`StreamingProvider` does the rest: the text callback, the attempt loop
(:func:`~zuno.agent.providers.retry.request_with_retries`) and the label.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from zuno.agent.messages import Message, ModelReply, ToolSpec
from zuno.agent.providers.retry import Endpoint, RetryPolicy, SdkErrors, request_with_retries

__all__ = ["ReplyAssembly", "SdkStream", "StreamingProvider"]

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


class SdkStream(Protocol[E_co]):
    """An SDK's open response stream: closed on exit, iterated for its events."""

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
                async for event in stream:
                    assembly.add(event)
            return assembly.reply()

        return await request_with_retries(
            attempt,
            where=self._endpoint,
            sdk=self.sdk_errors,
            policy=self._retry,
            streamed=lambda: shown,
        )

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
