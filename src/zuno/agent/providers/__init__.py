"""Model providers: the conversation and tool schemas in, one reply out.

A provider turns the provider-neutral conversation (:mod:`zuno.agent.messages`)
and the active surface's :class:`~zuno.agent.messages.ToolSpec` list into one
model request, streams the reply's text to a callback, and returns the reply's
tool calls with their names and argument text exactly as the model sent them.

``--model`` names a provider and a model, split at the first colon::

    openai:gpt-4o                  OPENAI_API_KEY, OPENAI_BASE_URL (as the SDK reads them)
    anthropic:claude-sonnet-4-5    ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL
    local:qwen2.5-coder:7b         a provider named in zuno.json (the model keeps its colon)

``zuno.json`` may name providers of either kind, with their own address and
key variable (a configured name may also replace ``openai`` or ``anthropic``)::

    {"providers": {"local": {"kind": "openai", "base_url": "http://127.0.0.1:11434/v1"},
                   "work":  {"kind": "anthropic", "api_key_env": "WORK_ANTHROPIC_KEY"}}}

A configured provider without ``api_key_env`` sends no real key: the standard
variables are never sent to an address someone else configured.

Images that tool results carry (``read`` of a PNG) are sent as image content;
a provider whose models cannot see images is configured with ``"images": false``
and its models read a sentence naming the image instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import ValidationError

from zuno.agent.providers.errors import (
    MissingCredentials,
    ProviderAuthError,
    ProviderBusy,
    ProviderConfigError,
    ProviderError,
    ProviderRejected,
    ProviderUnreachable,
)
from zuno.config.providers import ProviderSettings

if TYPE_CHECKING:
    import ssl

    from zuno.agent.messages import Message, ModelReply, ToolSpec
    from zuno.agent.providers.anthropic_messages import AnthropicMessagesProvider
    from zuno.agent.providers.clients import ClientPool
    from zuno.agent.providers.openai_chat import OpenAIChatProvider
    from zuno.agent.providers.retry import RetryPolicy
    from zuno.agent.providers.schemas import anthropic_tool, openai_tool

__all__ = [
    "AnthropicMessagesProvider",
    "ClientPool",
    "MissingCredentials",
    "OpenAIChatProvider",
    "Provider",
    "ProviderAuthError",
    "ProviderBusy",
    "ProviderConfigError",
    "ProviderError",
    "ProviderRejected",
    "ProviderUnreachable",
    "RetryPolicy",
    "anthropic_tool",
    "make_provider",
    "openai_tool",
    "tls_context",
]

# Importing an SDK takes seconds (anthropic ~5 s, openai ~2 s here), so each is
# imported only when a provider of its kind is made: ``zuno --help`` and an
# OpenAI run never pay for the Anthropic SDK.
# The message models, the retry policy and the tool schemas load on first use too.
_LAZY = {
    "AnthropicMessagesProvider": "zuno.agent.providers.anthropic_messages",
    "ClientPool": "zuno.agent.providers.clients",
    "OpenAIChatProvider": "zuno.agent.providers.openai_chat",
    "Endpoint": "zuno.agent.providers.retry",
    "RetryPolicy": "zuno.agent.providers.retry",
    "anthropic_tool": "zuno.agent.providers.schemas",
    "openai_tool": "zuno.agent.providers.schemas",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


_OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
_ANTHROPIC_DEFAULT_URL = "https://api.anthropic.com"
# Some SDKs refuse to start without a key; local servers ignore this one.
_NO_KEY = "zuno-no-key"


@runtime_checkable
class Provider(Protocol):
    """Something that can answer one model step."""

    @property
    def label(self) -> str:
        """``provider:model``, as named on the command line."""
        ...

    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        """Send the conversation and return the model's whole reply.

        Args:
            system: The system prompt ("" for none).
            messages: The conversation so far, tool results in call order.
            tools: The active surface's tools.
            on_text: Called with each text delta as it streams in.

        Returns:
            The reply. Its tool calls, in the model's order, are one dispatch
            batch; names and argument text are exactly as the model sent them.

        Raises:
            ProviderError: The request failed (after retries where that helps).
        """
        ...

    async def aclose(self) -> None:
        """Release the provider's connections."""
        ...


def _parse(model: str) -> tuple[str, str]:
    name, colon, rest = model.partition(":")
    if not colon or not name or not rest:
        raise ProviderConfigError(
            f"--model {model!r}: expected PROVIDER:MODEL, such as openai:gpt-4o or "
            "anthropic:claude-sonnet-4-5, or a provider named in zuno.json (NAME:MODEL)"
        )
    return name, rest


def _settings_for(
    name: str, model: str, providers: Mapping[str, ProviderSettings | Mapping[str, Any]]
) -> tuple[ProviderSettings, bool]:
    """The settings of provider ``name`` and whether they are a built-in's."""
    if name in providers:
        raw = providers[name]
        if isinstance(raw, ProviderSettings):
            return raw, False
        try:
            return ProviderSettings.model_validate(raw), False
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise ProviderConfigError(f"zuno.json providers.{name}: {problems}") from exc
    if name in ("openai", "anthropic"):
        return ProviderSettings(kind=name), True
    known = ", ".join(sorted({"openai", "anthropic", *providers}))
    raise ProviderConfigError(
        f"--model {name}:{model}: no provider named {name!r} (known: {known}). "
        "Name it in zuno.json under providers, with its kind and base_url."
    )


_TLS: dict[tuple[str, str], ssl.SSLContext] = {}


def tls_context() -> ssl.SSLContext:
    """One TLS context per process (per ``SSL_CERT_FILE``/``SSL_CERT_DIR``), shared by clients.

    Loading the certificate store takes tens of milliseconds; a client made per
    session (a fleet worker runs many) used to load it each time. The context is
    the one the SDKs would make themselves (httpx's, honouring those variables).
    """
    where = (os.environ.get("SSL_CERT_FILE", ""), os.environ.get("SSL_CERT_DIR", ""))
    context = _TLS.get(where)
    if context is None:
        import httpx

        context = _TLS[where] = httpx.create_ssl_context()
    return context


def make_provider(
    model: str,
    providers_config: Mapping[str, ProviderSettings | Mapping[str, Any]] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    retry: RetryPolicy | None = None,
) -> Provider:
    """The provider for a ``--model`` string.

    Args:
        model: ``PROVIDER:MODEL`` (``openai:gpt-4o``, ``anthropic:claude-...``,
            or ``NAME:MODEL`` for a provider in ``providers_config``).
        providers_config: ``zuno.json``'s ``providers`` map, as settings or raw dicts.
        environ: Where key and address variables are read (``os.environ`` by default).
        retry: Overrides the retry policy (tests use short delays); by default
            ``attempts`` from the settings with the standard backoff.

    Returns:
        A ready provider. Nothing is sent until its first ``complete``. Inside an
        open :class:`~zuno.agent.providers.clients.ClientPool` its SDK client is
        the pool's (one per API, address, key and timeout), else its own.

    Raises:
        ProviderConfigError: The string or the settings cannot be used.
        MissingCredentials: The key variable is unset or empty.
    """
    env = os.environ if environ is None else environ
    name, model_name = _parse(model)
    settings, builtin = _settings_for(name, model_name, providers_config or {})
    from zuno.agent.providers.clients import ClientKey, current_pool
    from zuno.agent.providers.retry import Endpoint, RetryPolicy

    pool = current_pool()
    policy = retry or RetryPolicy(attempts=settings.attempts)
    label = f"{name}:{model_name}"
    bearer = False

    if builtin:
        key_var = "OPENAI_API_KEY" if settings.kind == "openai" else "ANTHROPIC_API_KEY"
        url_var = "OPENAI_BASE_URL" if settings.kind == "openai" else "ANTHROPIC_BASE_URL"
        key = env.get(key_var) or ""
        if not key and settings.kind == "anthropic" and env.get("ANTHROPIC_AUTH_TOKEN"):
            # The SDK's second choice: a bearer token instead of an API key.
            key, bearer, key_var = env["ANTHROPIC_AUTH_TOKEN"], True, "ANTHROPIC_AUTH_TOKEN"
        base_url = env.get(url_var) or None
        key_setting, url_setting = key_var, url_var
        if not key:
            raise MissingCredentials(
                f"{label}: no API key. Set {key_var}, or name a provider in zuno.json "
                f"(providers.NAME with kind {settings.kind!r}, base_url and api_key_env)."
            )
    else:
        url_setting = f"zuno.json providers.{name}.base_url"
        base_url = settings.base_url
        if settings.api_key_env is None:
            key, key_setting = _NO_KEY, f"zuno.json providers.{name}.api_key_env (unset)"
        else:
            key_setting = f"{settings.api_key_env} (zuno.json providers.{name}.api_key_env)"
            key = env.get(settings.api_key_env) or ""
            if not key:
                raise MissingCredentials(
                    f"{label}: no API key. Set {settings.api_key_env}, the variable named by "
                    f"zuno.json providers.{name}.api_key_env."
                )

    if settings.kind == "openai":
        import openai

        from zuno.agent.providers.openai_chat import OpenAIChatProvider

        url = base_url or _OPENAI_DEFAULT_URL
        endpoint = Endpoint(
            label,
            url,
            f"{url_setting} (now {url})",
            key_setting,
            not_found_hint=" An OpenAI-compatible base URL usually ends in /v1.",
        )

        def make_openai() -> openai.AsyncOpenAI:
            return openai.AsyncOpenAI(
                api_key=key,
                base_url=url,
                max_retries=0,
                timeout=settings.timeout,
                http_client=openai.DefaultAsyncHttpxClient(verify=tls_context()),
            )

        client_key = ClientKey("openai", url, key, bearer, settings.timeout)
        openai_client = make_openai() if pool is None else pool.client(client_key, make_openai)
        return OpenAIChatProvider(
            openai_client,
            model_name,
            endpoint,
            retry=policy,
            strict_tools=settings.strict_tools,
            max_tokens=settings.max_tokens,
            images=settings.images,
            owns_client=pool is None,
        )
    import anthropic

    from zuno.agent.providers.anthropic_messages import AnthropicMessagesProvider

    url = base_url or _ANTHROPIC_DEFAULT_URL
    endpoint = Endpoint(label, url, f"{url_setting} (now {url})", key_setting)

    def make_anthropic() -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=None if bearer else key,
            auth_token=key if bearer else None,
            base_url=url,
            max_retries=0,
            timeout=settings.timeout,
            http_client=anthropic.DefaultAsyncHttpxClient(verify=tls_context()),
        )

    client_key = ClientKey("anthropic", url, key, bearer, settings.timeout)
    anthropic_client = make_anthropic() if pool is None else pool.client(client_key, make_anthropic)
    return AnthropicMessagesProvider(
        anthropic_client,
        model_name,
        endpoint,
        retry=policy,
        max_tokens=settings.max_tokens,
        images=settings.images,
        owns_client=pool is None,
    )
