"""Providers made one after another in a process (a fleet worker's sessions) share one TLS context.

Loading the certificate store costs tens of milliseconds; it used to be done for
every provider made. The providers made this way still talk to a model.
"""

from __future__ import annotations

import ssl
from typing import Any

import pytest
from fake_api import FakeModelServer, Reply

from zuno.agent.messages import UserMessage
from zuno.agent.providers import RetryPolicy, make_provider, tls_context

FAST = RetryPolicy(attempts=1)


def test_providers_share_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[ssl.SSLContext] = []
    real = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(ssl, "create_default_context", counted)
    env = {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}
    tls_context()  # this process's, made at most once
    before = len(made)
    for model in ("openai:gpt-4o", "openai:gpt-4o", "anthropic:claude-x", "anthropic:claude-x"):
        make_provider(model, environ=env, retry=FAST)
    assert len(made) == before


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_provider_made_after_another_still_answers(kind: str) -> None:
    with FakeModelServer([Reply(text="one"), Reply(text="two")]) as server:
        url = server.openai_base_url if kind == "openai" else server.anthropic_base_url
        config = {"fake": {"kind": kind, "base_url": url}}
        for expected in ("one", "two"):
            provider = make_provider("fake:m", config, environ={}, retry=FAST)
            try:
                reply = await provider.complete("", [UserMessage(text="hi")], [])
            finally:
                await provider.aclose()
            assert reply.text == expected
