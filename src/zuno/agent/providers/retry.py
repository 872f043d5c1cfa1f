"""Retrying model requests, and turning SDK failures into actionable errors.

A model request changes nothing in the world, so a transport failure, a 429 or
a 5xx is retried with exponential backoff and jitter. Both SDKs are built with
``max_retries=0`` and this module does the retrying instead, for two reasons:

- The SDKs retry only until response headers arrive. A stream that breaks
  after some text already reached the terminal cannot be retried silently
  (the person would see the text twice), and only the caller knows whether
  anything was shown. Here an attempt is retried only while nothing has been
  streamed to ``on_text``; after that the failure is raised.
- One explicit, tested policy for both providers, configurable per provider.

Each SDK failure becomes a :class:`~zuno.agent.providers.errors.ProviderError`
naming the setting to fix (the key variable, the base URL setting).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from zuno.agent.providers.errors import (
    ProviderAuthError,
    ProviderBusy,
    ProviderError,
    ProviderRejected,
    ProviderUnreachable,
)
from zuno.core.sentences import full_stop

__all__ = ["Endpoint", "RetryPolicy", "SdkErrors", "request_with_retries"]

T = TypeVar("T")

# Statuses worth another attempt: timeout, lock conflict, rate limit, server trouble.
_RETRY_STATUSES = frozenset({408, 409, 429})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a failed model request is attempted again.

    Attributes:
        attempts: Total attempts, the first included (1 disables retrying).
        base_delay: The delay before the second attempt, in seconds; it doubles
            for each further attempt.
        max_delay: The longest single delay, also the cap on ``Retry-After``.
    """

    attempts: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based).

        Jitter keeps many clients from retrying in lockstep; half of the
        exponential step is kept as a floor so a retry never comes instantly.
        A server's ``Retry-After`` is honoured up to ``max_delay``.
        """
        step = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        wait = step / 2 + random.uniform(0, step / 2)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_delay))
        return wait


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests go, and how to tell a person which setting to fix.

    Attributes:
        label: ``provider:model`` as the person wrote it.
        base_url: The address requests are sent to.
        base_url_setting: What sets that address (``OPENAI_BASE_URL``,
            ``zuno.json providers.local.base_url``).
        key_setting: What supplies the API key (``OPENAI_API_KEY``, ...).
        not_found_hint: Added to a 404's message (a common address mistake).
    """

    label: str
    base_url: str
    base_url_setting: str
    key_setting: str
    not_found_hint: str = ""


@dataclass(frozen=True, slots=True)
class SdkErrors:
    """The exception classes one SDK raises (both SDKs share this shape)."""

    connection: tuple[type[Exception], ...]
    """No response: refused, DNS, timeout, connection lost mid-stream."""
    status: type[Exception]
    """An HTTP error status; has ``status_code``, ``response`` and ``body``."""
    api: type[Exception]
    """Any other API failure, such as an error event inside a stream."""


@dataclass(frozen=True, slots=True)
class _Failure:
    error: ProviderError
    retryable: bool
    retry_after: float | None = None


def _api_message(exc: Exception) -> str:
    """The provider's own explanation, from the error body when there is one."""
    body: Any = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner: Any = body.get("error", body)  # type: ignore[union-attr]
        if isinstance(inner, dict):
            message: Any = inner.get("message")  # type: ignore[union-attr]
            if isinstance(message, str) and message:
                return message
        elif isinstance(inner, str) and inner:
            return inner
    return str(getattr(exc, "message", None) or exc)


def _retry_after(exc: Exception) -> float | None:
    response: Any = getattr(exc, "response", None)
    headers: Any = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue  # An HTTP date: rare from model APIs; the backoff will do.
    return None


def _classify(exc: Exception, where: Endpoint, sdk: SdkErrors, attempts: int) -> _Failure | None:
    """The ProviderError for an SDK failure, and whether another attempt may help."""
    tried = f" (after {attempts} attempts)" if attempts > 1 else ""
    if isinstance(exc, sdk.connection):
        detail = "timed out" if "timeout" in type(exc).__name__.lower() else "connection failed"
        cause = exc.__cause__
        if cause is not None and str(cause):
            detail = f"{detail}: {cause}"
        return _Failure(
            ProviderUnreachable(
                f"{where.label}: cannot reach {where.base_url} ({detail}){tried}. "
                f"Check {where.base_url_setting} and that the server is running."
            ),
            retryable=True,
        )
    if isinstance(exc, sdk.status):
        status = int(getattr(exc, "status_code", 0))
        said = _api_message(exc)
        if status < 400:
            # An error event inside a stream that began with 200 (overloaded, internal).
            return _Failure(
                ProviderBusy(f"{where.label}: the provider reported an error{tried}: {said}"),
                retryable=True,
            )
        if status in (401, 403):
            return _Failure(
                ProviderAuthError(
                    f"{where.label}: {where.base_url} refused the API key ({status}: {said}). "
                    f"Check {where.key_setting}."
                ),
                retryable=False,
            )
        if status in _RETRY_STATUSES or status >= 500:
            hint = "Wait and try again" if status == 429 else "Try again later"
            return _Failure(
                ProviderBusy(
                    f"{where.label}: {where.base_url} answered {status}{tried}: "
                    f"{full_stop(said)} {hint}.",
                    status=status,
                ),
                retryable=True,
                retry_after=_retry_after(exc),
            )
        hint = ""
        if status == 404:
            hint = f" Check the model name, and {where.base_url_setting}.{where.not_found_hint}"
        return _Failure(
            ProviderRejected(
                f"{where.label}: the request was refused ({status}): {full_stop(said)}{hint}",
                status,
            ),
            retryable=False,
        )
    if isinstance(exc, sdk.api):
        # An error event inside an otherwise healthy stream (overloaded, internal).
        return _Failure(
            ProviderBusy(f"{where.label}: the provider reported an error{tried}: {exc}"),
            retryable=True,
        )
    return None


async def request_with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    where: Endpoint,
    sdk: SdkErrors,
    policy: RetryPolicy,
    streamed: Callable[[], bool],
) -> T:
    """Run ``attempt`` until it succeeds, retrying what a retry can fix.

    Args:
        attempt: One complete request, from sending to the end of the stream.
        where: The endpoint, for error messages.
        sdk: The SDK's exception classes.
        policy: How many attempts, and how long between them.
        streamed: Whether any text has reached the caller; once it has, a
            failure is raised instead of retried.

    Returns:
        What ``attempt`` returned.

    Raises:
        ProviderError: A failure that retrying did not, or could not, fix.
    """
    number = 1
    while True:
        try:
            return await attempt()
        except ProviderError:
            raise
        except Exception as exc:
            failure = _classify(exc, where, sdk, number)
            if failure is None:
                raise
            if not failure.retryable or number >= policy.attempts or streamed():
                raise failure.error from exc
        await anyio.sleep(policy.delay(number, failure.retry_after))
        number += 1
