"""Provider failures, each saying which setting to fix.

The hierarchy::

    ProviderError                 any failure to get a model reply
      ProviderConfigError         the model string or provider settings are unusable
        MissingCredentials        the API key variable is unset or empty
      ProviderUnreachable         no connection (refused, DNS, timeout), after retries
      ProviderAuthError           the provider refused the key (401 / 403)
      ProviderBusy                rate limited or failing (429 / 5xx), after retries
      ProviderRejected            the provider refused the request (other 4xx:
                                  unknown model, bad schema, context too long)
      UnreadableReply             the server answered 200, but not with a reply
                                  (an HTML page, an object of the wrong shape,
                                  a stream with no events)

None of these is a tool outcome: a model request is not a side effect, so the
agent loop may report it and stop, or try the step again.
"""

from __future__ import annotations

__all__ = [
    "MissingCredentials",
    "ProviderAuthError",
    "ProviderBusy",
    "ProviderConfigError",
    "ProviderError",
    "ProviderRejected",
    "ProviderUnreachable",
    "UnreadableReply",
]


class ProviderError(Exception):
    """A model request that could not produce a reply; the message says what to do."""


class ProviderConfigError(ProviderError):
    """The ``--model`` string or the provider settings cannot be used."""


class MissingCredentials(ProviderConfigError):
    """The API key setting is unset or empty."""


class ProviderUnreachable(ProviderError):
    """The provider's address could not be reached (after retries)."""


class ProviderAuthError(ProviderError):
    """The provider refused the credentials."""


class ProviderBusy(ProviderError):
    """The provider kept answering 429 or 5xx (after retries)."""

    status: int | None

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ProviderRejected(ProviderError):
    """The provider refused the request itself (a 4xx other than auth and rate limits)."""

    status: int

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class UnreadableReply(ProviderError):
    """The server answered, but its body is not a model reply this provider can read.

    Never retried: the same address would most likely send the same body, and
    a request that reached a model may cost money. The message names the
    content type and what was wrong, and the address setting to check.
    """
