"""Per-call costs a provider pays once: one TLS context a process, tool schemas once a provider.

Loading the certificate store costs tens of milliseconds; it used to be done for
every provider made. The providers made this way still talk to a model.
"""

from __future__ import annotations

import ssl
from typing import Any

import pytest
from fake_api import FakeModelServer, Reply

from zuno.agent.messages import ToolSpec, UserMessage
from zuno.agent.providers import make_provider, schemas, tls_context
from zuno.agent.providers.retry import RetryPolicy

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


_PARAMS = {
    "type": "object",
    "properties": {"path": {"$ref": "#/$defs/P"}},
    "required": ["path"],
    "$defs": {"P": {"type": "string"}},
}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_tool_entries_are_built_once_per_provider(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every request of a session carries the same tools; their schemas are adapted once."""
    inlined: list[object] = []
    real = schemas.inline_schema

    def counted(schema: Any) -> Any:
        inlined.append(schema)
        return real(schema)

    monkeypatch.setattr(schemas, "inline_schema", counted)
    tools = [ToolSpec(name="read", description="Read a file.", parameters=_PARAMS)]
    with FakeModelServer([Reply(text="one"), Reply(text="two"), Reply(text="three")]) as server:
        url = server.openai_base_url if kind == "openai" else server.anthropic_base_url
        config = {"fake": {"kind": kind, "base_url": url, "strict_tools": False}}
        if kind == "anthropic":
            del config["fake"]["strict_tools"]
        provider = make_provider("fake:m", config, environ={}, retry=FAST)
        try:
            for _ in range(2):
                await provider.complete("", [UserMessage(text="hi")], list(tools))
            built = len(inlined)
            other = [ToolSpec(name="grep", description="Search.", parameters=_PARAMS)]
            await provider.complete("", [UserMessage(text="hi")], other)
        finally:
            await provider.aclose()
        sent = [request.body["tools"] for request in server.requests]
    assert built == 1
    assert len(inlined) == 2  # another tool list is adapted anew
    assert sent[0] == sent[1] != sent[2]
    assert "$ref" not in str(sent[0])
