"""The providers, through the real SDKs, against a real scripted HTTP server."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any, Literal

import pytest
from fake_api import Failure, FakeModelServer, Reply, free_port
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionChunk
from pydantic import BaseModel, ConfigDict, Field

from zuno.agent.messages import (
    AssistantMessage,
    Message,
    StopReason,
    ToolCallRequest,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from zuno.agent.providers import (
    MissingCredentials,
    Provider,
    ProviderAuthError,
    ProviderBusy,
    ProviderConfigError,
    ProviderRejected,
    ProviderUnreachable,
    make_provider,
)
from zuno.agent.providers.openai_chat import _Assembly  # pyright: ignore[reportPrivateUsage]
from zuno.agent.providers.retry import RetryPolicy
from zuno.agent.providers.schemas import anthropic_tool, openai_tool, strict_schema
from zuno.config.providers import ProviderSettings

Kind = Literal["openai", "anthropic"]
KINDS: list[Kind] = ["openai", "anthropic"]
FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)


class ReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    limit: int | None = None


READ = ToolSpec(name="read", description="Read a file.", parameters=ReadArgs.model_json_schema())


def fake_config(server: FakeModelServer, kind: Kind, **extra: Any) -> dict[str, Any]:
    url = server.openai_base_url if kind == "openai" else server.anthropic_base_url
    return {"fake": {"kind": kind, "base_url": url, "api_key_env": "FAKE_KEY", **extra}}


def sent_key(headers: dict[str, str]) -> str | None:
    """The key a request carried (this Anthropic SDK sends it as a bearer token)."""
    bearer = headers.get("authorization", "")
    return headers.get("x-api-key") or (bearer.removeprefix("Bearer ") or None)


@asynccontextmanager
async def opened(
    server: FakeModelServer, kind: Kind, model: str = "fake:test-model", **extra: Any
) -> AsyncGenerator[Provider]:
    provider = make_provider(
        model, fake_config(server, kind, **extra), environ={"FAKE_KEY": "sk-test"}, retry=FAST
    )
    try:
        yield provider
    finally:
        await provider.aclose()


# -- replies ---------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_text_streams_to_the_callback_in_pieces(kind: Kind) -> None:
    text = "Hello there, I will look at the failing test."
    pieces: list[str] = []
    with FakeModelServer([Reply(text=text, chunk_size=5)], api_key="sk-test") as server:
        async with opened(server, kind) as provider:
            reply = await provider.complete("be brief", [UserMessage(text="hi")], [], pieces.append)
    assert pieces == [text[i : i + 5] for i in range(0, len(text), 5)]
    assert "".join(pieces) == text == reply.text
    assert reply.tool_calls == ()
    assert reply.stop_reason is StopReason.END_TURN
    assert reply.usage.input_tokens == 11
    assert reply.usage.output_tokens == 7


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_several_tool_calls_come_back_as_one_batch_in_order(kind: Kind) -> None:
    calls = [
        ("call_a", "read", '{"path": "src/a.py"}'),
        ("call_b", "grep", '{"pattern": "def main", "path": "src"}'),
        ("call_c", "read", '{"path": "README.md", "limit": 20}'),
    ]
    script = [Reply(text="Looking.", tool_calls=calls, chunk_size=3)]
    with FakeModelServer(script) as server:
        async with opened(server, kind) as provider:
            reply = await provider.complete("", [UserMessage(text="go")], [READ])
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == calls
    assert reply.text == "Looking."
    assert reply.stop_reason is StopReason.TOOL_CALLS


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_malformed_arguments_and_unknown_tools_pass_through_untouched(kind: Kind) -> None:
    calls = [
        ("call_1", "read", '{"path": "a.py", '),  # truncated JSON
        ("call_2", "no_such_tool", '{"x": 1}'),
        ("call_3", "read", "path=a.py"),  # not JSON at all
        ("call_4", "read", '["a.py"]'),  # JSON, but not an object
    ]
    with FakeModelServer([Reply(tool_calls=calls)]) as server:
        async with opened(server, kind) as provider:
            reply = await provider.complete("", [UserMessage(text="go")], [READ])
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == calls


@pytest.mark.anyio
async def test_anthropic_call_without_argument_deltas_gets_an_empty_object() -> None:
    with FakeModelServer([Reply(tool_calls=[("toolu_1", "todo_get", "")])]) as server:
        async with opened(server, "anthropic") as provider:
            reply = await provider.complete("", [UserMessage(text="go")], [])
    assert reply.tool_calls[0].arguments == "{}"


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_max_tokens_stop_is_reported(kind: Kind) -> None:
    stop = "length" if kind == "openai" else "max_tokens"
    with FakeModelServer([Reply(text="cut", stop_reason=stop)]) as server:
        async with opened(server, kind) as provider:
            reply = await provider.complete("", [UserMessage(text="go")], [])
    assert reply.stop_reason is StopReason.MAX_TOKENS
    assert reply.raw_stop_reason == stop


# -- what is sent ----------------------------------------------------------------

HISTORY: list[Message] = [
    UserMessage(text="fix it"),
    AssistantMessage(
        text="Reading both.",
        tool_calls=(
            ToolCallRequest(id="call_1", name="read", arguments='{"path": "a"}'),
            ToolCallRequest(id="call_2", name="nope", arguments='{"path": '),
        ),
    ),
    ToolResultMessage(call_id="call_1", name="read", content="contents of a"),
    ToolResultMessage(call_id="call_2", name="nope", content="unknown tool", is_error=True),
]


@pytest.mark.anyio
async def test_openai_request_carries_tool_results_in_call_order_and_strict_schemas() -> None:
    with FakeModelServer([Reply(text="ok")], api_key="sk-test") as server:
        async with opened(server, "openai") as provider:
            await provider.complete("you are zuno", HISTORY, [READ])
        (request,) = server.requests
    body = request.body
    assert request.headers["authorization"] == "Bearer sk-test"
    assert body["model"] == "test-model"
    assert body["stream"] is True
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool"]
    assert messages[0]["content"] == "you are zuno"
    sent_calls = messages[2]["tool_calls"]
    assert [c["id"] for c in sent_calls] == ["call_1", "call_2"]
    assert sent_calls[1]["function"]["arguments"] == '{"path": '  # raw, as the model sent it
    assert [(m["tool_call_id"], m["content"]) for m in messages[3:]] == [
        ("call_1", "contents of a"),
        ("call_2", "unknown tool"),
    ]
    (tool,) = body["tools"]
    assert tool["type"] == "function"
    function = tool["function"]
    assert function["strict"] is True
    assert function["parameters"] == {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "required": ["path", "limit"],
        "additionalProperties": False,
    }


@pytest.mark.anyio
async def test_anthropic_request_merges_tool_results_into_one_user_turn_in_order() -> None:
    with FakeModelServer([Reply(text="ok")], api_key="sk-test") as server:
        async with opened(server, "anthropic", max_tokens=1000) as provider:
            await provider.complete("you are zuno", HISTORY, [READ])
        (request,) = server.requests
    body = request.body
    assert sent_key(request.headers) == "sk-test"
    assert body["system"] == "you are zuno"
    assert body["max_tokens"] == 1000
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assistant = body["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["text", "tool_use", "tool_use"]
    assert assistant[1]["input"] == {"path": "a"}
    assert assistant[2]["input"] == {}  # malformed arguments cannot be echoed as an object
    results = body["messages"][2]["content"]
    assert [(r["tool_use_id"], r["content"], r["is_error"]) for r in results] == [
        ("call_1", "contents of a", False),
        ("call_2", "unknown tool", True),
    ]
    (tool,) = body["tools"]
    assert tool["name"] == "read"
    assert tool["input_schema"]["properties"]["path"] == {"type": "string"}
    assert tool["input_schema"]["required"] == ["path"]


@pytest.mark.anyio
async def test_model_names_keep_their_own_colons(model_server: FakeModelServer) -> None:
    model_server.enqueue(Reply(text="ok"))
    async with opened(model_server, "openai", model="fake:qwen2.5-coder:7b") as provider:
        assert provider.label == "fake:qwen2.5-coder:7b"
        await provider.complete("", [UserMessage(text="hi")], [])
    assert model_server.requests[0].body["model"] == "qwen2.5-coder:7b"


# -- retries and errors ----------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("failure", [Failure(500), Failure(429, retry_after=0.01)])
async def test_a_transient_failure_is_retried(kind: Kind, failure: Failure) -> None:
    with FakeModelServer([failure, Reply(text="second time")]) as server:
        async with opened(server, kind) as provider:
            reply = await provider.complete("", [UserMessage(text="hi")], [])
        assert reply.text == "second time"
        assert len(server.requests) == 2
        assert server.requests[0].body == server.requests[1].body


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_retries_give_up_after_the_configured_attempts(kind: Kind) -> None:
    script = [Failure(503, "overloaded right now")] * 3 + [Reply(text="too late")]
    with FakeModelServer(script) as server:
        async with opened(server, kind) as provider:
            with pytest.raises(ProviderBusy, match="overloaded right now") as caught:
                await provider.complete("", [UserMessage(text="hi")], [])
        assert len(server.requests) == 3
    assert caught.value.status == 503
    assert "after 3 attempts" in str(caught.value)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_attempts_setting_of_one_disables_retrying(kind: Kind) -> None:
    with FakeModelServer([Failure(500), Reply(text="unused")]) as server:
        url = server.openai_base_url if kind == "openai" else server.anthropic_base_url
        settings = {"fake": ProviderSettings(kind=kind, base_url=url, attempts=1)}
        provider = make_provider("fake:m", settings, environ={})
        try:
            with pytest.raises(ProviderBusy):
                await provider.complete("", [UserMessage(text="hi")], [])
        finally:
            await provider.aclose()
        assert server.remaining == 1


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_refused_key_names_the_key_variable(kind: Kind) -> None:
    with FakeModelServer([Reply(text="never")], api_key="the-real-key") as server:
        async with opened(server, kind) as provider:
            with pytest.raises(ProviderAuthError) as caught:
                await provider.complete("", [UserMessage(text="hi")], [])
        assert len(server.requests) == 1  # 401 is not retried
        assert server.remaining == 1  # and a refused request does not use up the script
    message = str(caught.value)
    assert "401" in message
    assert "FAKE_KEY" in message
    assert "providers.fake.api_key_env" in message


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_an_unknown_model_is_a_rejection_naming_the_address(kind: Kind) -> None:
    with FakeModelServer([Failure(404, "model 'test-model' not found")]) as server:
        async with opened(server, kind) as provider:
            with pytest.raises(ProviderRejected, match="model 'test-model' not found") as caught:
                await provider.complete("", [UserMessage(text="hi")], [])
    assert caught.value.status == 404
    assert "providers.fake.base_url" in str(caught.value)


@pytest.mark.anyio
async def test_an_unreachable_builtin_provider_names_its_base_url_variable() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    env = {"OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": url}
    provider = make_provider("openai:gpt-4o", environ=env, retry=FAST)
    try:
        with pytest.raises(ProviderUnreachable) as caught:
            await provider.complete("", [UserMessage(text="hi")], [])
    finally:
        await provider.aclose()
    message = str(caught.value)
    assert "OPENAI_BASE_URL" in message
    assert url in message
    assert "after 3 attempts" in message


@pytest.mark.anyio
async def test_an_unreachable_configured_provider_names_its_setting() -> None:
    config = {"local": {"kind": "anthropic", "base_url": f"http://127.0.0.1:{free_port()}"}}
    provider = make_provider("local:m", config, environ={}, retry=FAST)
    try:
        with pytest.raises(ProviderUnreachable, match=r"zuno\.json providers\.local\.base_url"):
            await provider.complete("", [UserMessage(text="hi")], [])
    finally:
        await provider.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_stream_cut_after_text_was_shown_is_not_retried(kind: Kind) -> None:
    shown: list[str] = []
    script = [Reply(text="a long answer that breaks", chunk_size=2, cut_after=4), Reply(text="x")]
    with FakeModelServer(script) as server:
        async with opened(server, kind) as provider:
            with pytest.raises(ProviderUnreachable):
                await provider.complete("", [UserMessage(text="hi")], [], shown.append)
        assert len(server.requests) == 1
    assert shown  # the person saw part of it, so a silent retry would repeat it


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_stream_cut_before_any_text_is_retried(kind: Kind) -> None:
    shown: list[str] = []
    script = [Reply(text="first", cut_after=0), Reply(text="second")]
    with FakeModelServer(script) as server:
        async with opened(server, kind) as provider:
            reply = await provider.complete("", [UserMessage(text="hi")], [], shown.append)
        assert len(server.requests) == 2
    assert reply.text == "".join(shown) == "second"


# -- the factory -----------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("kind", "key_var", "url_var"),
    [
        ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
        ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    ],
)
async def test_builtin_providers_honour_the_sdk_variables(
    kind: Kind, key_var: str, url_var: str
) -> None:
    with FakeModelServer([Reply(text="hi")], api_key="k-123") as server:
        url = server.openai_base_url if kind == "openai" else server.anthropic_base_url
        provider = make_provider(f"{kind}:m", environ={key_var: "k-123", url_var: url})
        try:
            reply = await provider.complete("", [UserMessage(text="hi")], [])
        finally:
            await provider.aclose()
        assert reply.text == "hi"
        assert sent_key(server.requests[0].headers) == "k-123"


@pytest.mark.anyio
async def test_anthropic_auth_token_is_the_second_choice(model_server: FakeModelServer) -> None:
    model_server.enqueue(Reply(text="ok"))
    env = {"ANTHROPIC_AUTH_TOKEN": "tok-1", "ANTHROPIC_BASE_URL": model_server.anthropic_base_url}
    provider = make_provider("anthropic:m", environ=env)
    try:
        await provider.complete("", [UserMessage(text="hi")], [])
    finally:
        await provider.aclose()
    assert model_server.requests[0].headers["authorization"] == "Bearer tok-1"


@pytest.mark.parametrize(
    ("model", "config", "variable"),
    [
        ("openai:gpt-4o", None, "OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4-5", None, "ANTHROPIC_API_KEY"),
        ("work:m", {"work": {"kind": "openai", "api_key_env": "WORK_KEY"}}, "WORK_KEY"),
    ],
)
def test_a_missing_key_names_the_variable_to_set(
    model: str, config: dict[str, Any] | None, variable: str
) -> None:
    with pytest.raises(MissingCredentials, match=variable):
        make_provider(model, config, environ={"UNRELATED": "1"})


def test_a_configured_provider_without_a_key_variable_needs_no_key() -> None:
    config = {"local": {"kind": "openai", "base_url": "http://127.0.0.1:11434/v1"}}
    provider = make_provider("local:llama3", config, environ={"OPENAI_API_KEY": "sk-real"})
    assert isinstance(provider, Provider)
    assert provider.label == "local:llama3"


@pytest.mark.parametrize(
    ("model", "config", "fragment"),
    [
        ("gpt-4o", None, "expected PROVIDER:MODEL"),
        ("openai:", None, "expected PROVIDER:MODEL"),
        ("mystery:m", {"local": {"kind": "openai"}}, "known: anthropic, local, openai"),
        ("local:m", {"local": {"kind": "gemini"}}, "zuno.json providers.local: kind"),
        ("local:m", {"local": {"kind": "openai", "apikey": "x"}}, "providers.local: apikey"),
    ],
)
def test_bad_model_strings_and_settings_say_what_to_fix(
    model: str, config: dict[str, Any] | None, fragment: str
) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        make_provider(model, config, environ={"OPENAI_API_KEY": "k"})
    assert fragment in str(caught.value)


def test_provider_settings_embed_in_a_config_file() -> None:
    raw = {"kind": "anthropic", "base_url": "http://proxy", "api_key_env": "K", "attempts": 5}
    settings = ProviderSettings.model_validate_json(json.dumps(raw))
    assert settings.attempts == 5
    assert ProviderSettings.model_json_schema()["properties"]["kind"]["enum"] == [
        "openai",
        "anthropic",
    ]


# -- tool schemas ----------------------------------------------------------------


class Range(BaseModel):
    start: int
    end: int | None = None


# Nested models, a literal, a list, a field called "title", and descriptions.
class EditArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="The file.", min_length=1)
    mode: Literal["replace", "append"]
    ranges: list[Range]
    title: str | None = None
    anchor: Range | None = Field(default=None, description="Where to start.")


def spec_of(model: type[BaseModel]) -> ToolSpec:
    return ToolSpec(name="t", description="d", parameters=model.model_json_schema())


def test_strict_schema_closes_every_object_and_makes_optionals_nullable() -> None:
    schema = strict_schema(EditArgs.model_json_schema())
    range_schema = {
        "type": "object",
        "properties": {
            "start": {"type": "integer"},
            "end": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "required": ["start", "end"],
        "additionalProperties": False,
    }
    assert schema == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The file."},  # minLength left out
            "mode": {"type": "string", "enum": ["replace", "append"]},
            "ranges": {"type": "array", "items": range_schema},
            "title": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "anchor": {"anyOf": [range_schema, {"type": "null"}], "description": "Where to start."},
        },
        "required": ["path", "mode", "ranges", "title", "anchor"],
        "additionalProperties": False,
    }
    assert "$defs" not in json.dumps(schema)
    assert '"title": "' not in json.dumps(schema)  # titles dropped, the property kept


class WithDefault(BaseModel):
    path: str
    limit: int = 100


class WithMap(BaseModel):
    env: dict[str, str]


class WithTuple(BaseModel):
    point: tuple[int, int]


class Tree(BaseModel):
    name: str
    children: list[Tree] = Field(default_factory=lambda: [])


@pytest.mark.parametrize("model", [WithDefault, WithMap, WithTuple, Tree])
def test_schemas_strict_mode_cannot_express_stay_non_strict(model: type[BaseModel]) -> None:
    assert strict_schema(model.model_json_schema()) is None
    function = openai_tool(spec_of(model), strict=True)["function"]
    assert "strict" not in function
    assert function["parameters"]["type"] == "object"


def test_non_strict_and_anthropic_schemas_are_inlined_and_keep_constraints() -> None:
    openai_params = openai_tool(spec_of(EditArgs), strict=False)["function"]["parameters"]
    anthropic_params = anthropic_tool(spec_of(EditArgs))["input_schema"]
    assert openai_params == anthropic_params
    assert anthropic_params["required"] == ["path", "mode", "ranges"]
    assert anthropic_params["properties"]["path"]["minLength"] == 1
    assert anthropic_params["properties"]["ranges"]["items"]["properties"]["start"] == {
        "type": "integer"
    }
    assert "$ref" not in json.dumps(anthropic_params)
    assert "title" not in anthropic_params


def test_a_recursive_schema_keeps_its_definitions() -> None:
    params = anthropic_tool(spec_of(Tree))["input_schema"]
    assert "Tree" in params["$defs"]


def test_a_tool_without_arguments_is_an_empty_strict_object() -> None:
    class NoArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")

    function = openai_tool(spec_of(NoArgs))["function"]
    assert function["strict"] is True
    assert function["parameters"] == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_servers_that_number_every_tool_call_zero_still_give_separate_calls() -> None:
    # Some OpenAI-compatible servers send each whole call at index 0.
    def chunk(call_id: str, name: str, args: str) -> ChatCompletionChunk:
        call: dict[str, Any] = {"index": 0, "id": call_id, "type": "function"}
        call["function"] = {"name": name, "arguments": args}
        choice = {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}
        return ChatCompletionChunk.model_validate(
            {
                "id": "x",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [choice],
            }
        )

    assembly = _Assembly(on_text=None)
    assembly.add(chunk("c1", "read", '{"path": "a"}'))
    assembly.add(chunk("c2", "read", '{"path": "b"}'))
    reply = assembly.reply()
    assert [(c.id, c.arguments) for c in reply.tool_calls] == [
        ("c1", '{"path": "a"}'),
        ("c2", '{"path": "b"}'),
    ]
    assert reply.stop_reason is StopReason.TOOL_CALLS


# -- the fake server's non-streamed answers (for callers that do not stream) -----


@pytest.mark.anyio
async def test_fake_server_non_streamed_replies_parse_in_both_sdks(
    model_server: FakeModelServer,
) -> None:
    import anthropic
    import openai

    calls = [("call_1", "read", '{"path": "a"}')]
    model_server.enqueue(Reply(text="hi", tool_calls=calls), Reply(text="hi", tool_calls=calls))
    async with openai.AsyncOpenAI(api_key="k", base_url=model_server.openai_base_url) as oa:
        completion = await oa.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    async with anthropic.AsyncAnthropic(
        api_key="k", base_url=model_server.anthropic_base_url
    ) as an:
        message = await an.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    choice = completion.choices[0]
    assert choice.message.content == "hi"
    assert choice.finish_reason == "tool_calls"
    assert [c.id for c in choice.message.tool_calls or []] == ["call_1"]
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.stop_reason == "tool_use"


@given(
    arguments=st.text(max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=6),
)
def test_argument_pieces_reassemble_exactly_however_they_are_split(
    arguments: str, cuts: list[int]
) -> None:
    bounds = sorted({0, len(arguments), *(c for c in cuts if c <= len(arguments))})
    pieces = [arguments[a:b] for a, b in itertools.pairwise(bounds)]
    assembly = _Assembly(on_text=None)
    first = {"index": 0, "id": "c1", "type": "function", "function": {"name": "read"}}
    parts: list[dict[str, Any]] = [first]
    parts += [{"index": 0, "function": {"arguments": p}} for p in pieces]
    for part in parts:
        choice = {"index": 0, "delta": {"tool_calls": [part]}, "finish_reason": None}
        assembly.add(
            ChatCompletionChunk.model_validate(
                {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
                | {"choices": [choice]}
            )
        )
    (call,) = assembly.reply().tool_calls
    assert call.arguments == arguments


@given(attempt=st.integers(min_value=1, max_value=12), retry_after=st.none() | st.floats(0, 100))
def test_backoff_grows_with_jitter_and_respects_its_cap(
    attempt: int, retry_after: float | None
) -> None:
    policy = RetryPolicy(attempts=5, base_delay=0.5, max_delay=8.0)
    step = min(8.0, 0.5 * 2 ** (attempt - 1))
    wait = policy.delay(attempt, retry_after)
    assert step / 2 <= wait <= 8.0
    if retry_after is None:
        assert wait <= step
    else:
        assert wait >= min(retry_after, 8.0)
