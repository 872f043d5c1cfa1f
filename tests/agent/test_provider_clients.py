"""Providers made inside a ClientPool share one SDK client per API, address and key.

A fleet worker makes a provider for every session; each used to build its own
SDK client, with a new connection to the same model server. Judged from the
server's side (the client port of each request, the key each carried), and by
what the OpenAI request costs to build (no pass of the SDK's over the body).
"""

from __future__ import annotations

from typing import Any

import pytest
from fake_api import FakeModelServer, Reply

from zuno.agent.messages import ToolSpec, UserMessage
from zuno.agent.providers import make_provider
from zuno.agent.providers.clients import ClientPool
from zuno.agent.providers.retry import RetryPolicy

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(attempts=1)


def _config(kind: str, server: FakeModelServer, key_env: str = "FAKE_KEY") -> dict[str, Any]:
    url = server.openai_base_url if kind == "openai" else server.anthropic_base_url
    return {"fake": {"kind": kind, "base_url": url, "api_key_env": key_env}}


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_providers_of_one_pool_share_a_connection(kind: str) -> None:
    script = [Reply(text="one"), Reply(text="two"), Reply(text="three")]
    with FakeModelServer(script, api_key="sk-a") as server:
        env = {"FAKE_KEY": "sk-a"}
        async with ClientPool() as pool:
            for expected in ("one", "two"):
                provider = make_provider("fake:m", _config(kind, server), environ=env, retry=FAST)
                try:
                    reply = await provider.complete("", [UserMessage(text="hi")], [])
                finally:
                    await provider.aclose()  # the pool's client stays open for the next one
                assert reply.text == expected
            assert pool.made == 1
        # Outside a pool a provider has a client (and a connection) of its own.
        provider = make_provider("fake:m", _config(kind, server), environ=env, retry=FAST)
        try:
            assert (await provider.complete("", [UserMessage(text="hi")], [])).text == "three"
        finally:
            await provider.aclose()
        ports = [r.client_port for r in server.requests]
    assert ports[0] == ports[1] != ports[2]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_pool_never_sends_one_providers_key_for_another(kind: str) -> None:
    with FakeModelServer([Reply(text="a"), Reply(text="b")]) as server:
        env = {"KEY_A": "sk-a", "KEY_B": "sk-b"}
        async with ClientPool() as pool:
            for key_env in ("KEY_A", "KEY_B"):
                config = _config(kind, server, key_env)
                provider = make_provider("fake:m", config, environ=env, retry=FAST)
                try:
                    await provider.complete("", [UserMessage(text="hi")], [])
                finally:
                    await provider.aclose()
            assert pool.made == 2
        sent = [
            r.headers.get("authorization") or r.headers.get("x-api-key") for r in server.requests
        ]
    assert [s.removeprefix("Bearer ") if s else s for s in sent] == ["sk-a", "sk-b"]


async def test_an_openai_request_is_posted_as_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """The body goes out as Zuno built it: the SDK's recursive transform is not run over it."""
    from openai.resources.chat.completions import completions

    transformed: list[object] = []
    real = completions.async_maybe_transform  # pyright: ignore[reportPrivateImportUsage]

    async def counted(data: Any, expected: Any) -> Any:
        transformed.append(data)
        return await real(data, expected)

    monkeypatch.setattr(completions, "async_maybe_transform", counted)
    params = {
        "type": "object",
        "properties": {"path": {"type": "string", "title": "Path"}},
        "required": ["path"],
    }
    tools = [ToolSpec(name="read", description="Read a file.", parameters=params)]
    with FakeModelServer([Reply(text="ok")]) as server:
        config = {"fake": {"kind": "openai", "base_url": server.openai_base_url}}
        provider = make_provider("fake:gpt", config, environ={}, retry=FAST)
        try:
            reply = await provider.complete("Be brief.", [UserMessage(text="hi")], tools)
        finally:
            await provider.aclose()
        body = server.requests[0].body
        headers = server.requests[0].headers
    assert reply.text == "ok"
    assert transformed == []
    assert body["model"] == "gpt" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    function = body["tools"][0]["function"]
    assert function["name"] == "read" and function["strict"] is True
    assert function["parameters"]["properties"] == {"path": {"type": "string"}}
    assert headers["authorization"] == "Bearer zuno-no-key"
