"""Error texts that quote someone else's words end each sentence once, never with ``..``.

A provider's message, a server's error body or a tool's own reason often ends
with a full stop already; the sentence Zuno wraps around it must not add a
second. Each case here is reached the way a user reaches it: a real SDK
against a scripted HTTP server, a call through the dispatcher.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

import pytest
from fake_api import Failure, FakeModelServer, Reply

from zuno.agent.messages import UserMessage
from zuno.agent.providers import ProviderError, make_provider
from zuno.agent.providers.retry import RetryPolicy
from zuno.config.loading import Config
from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolResult, UncertainOutcome
from zuno.core.declarations import Concurrency, Declaration, Effect, Outcome, Replay
from zuno.dispatch.dispatcher import CallRequest
from zuno.integrations.web._http import status_failure  # pyright: ignore[reportPrivateUsage]
from zuno.policy.approvals import ApproveAll
from zuno.session.builtin_tools import builtin_tools
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

Kind = Literal["openai", "anthropic"]
SAID = "The model is overloaded. Please try again."
"""A provider's own message, ending a sentence as providers' messages do."""


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("status", [400, 401, 503])
async def test_a_providers_message_is_quoted_without_a_double_stop(kind: Kind, status: int) -> None:
    with FakeModelServer([Failure(status, SAID), Reply(text="unused")]) as server:
        url = server.openai_base_url if kind == "openai" else server.anthropic_base_url
        settings = {"fake": {"kind": kind, "base_url": url, "api_key_env": "FAKE_KEY"}}
        provider = make_provider(
            "fake:m", settings, environ={"FAKE_KEY": "sk-test"}, retry=RetryPolicy(attempts=1)
        )
        try:
            with pytest.raises(ProviderError) as caught:
                await provider.complete("", [UserMessage(text="hi")], [])
        finally:
            await provider.aclose()
    message = str(caught.value)
    assert "The model is overloaded" in message
    assert ".." not in message, message


def test_a_servers_error_body_is_quoted_without_a_double_stop() -> None:
    for status in (503, 404, 418):
        message = str(status_failure(status, "Oops", "https://example.com/", excerpt=SAID))
        assert "Please try again" in message
        assert ".." not in message, message


class _NoArgs(ToolArgs):
    pass


class _Lost(Tool[_NoArgs]):
    """Its effect cannot be known; its reason ends a sentence."""

    name: ClassVar[str] = "lost"
    description: ClassVar[str] = "Test tool."
    args_model = _NoArgs
    declaration: ClassVar[Declaration] = Declaration(
        Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.EXCLUSIVE
    )

    async def run(self, args: _NoArgs, ctx: ToolContext) -> ToolResult:
        raise UncertainOutcome("The connection dropped after the request was sent.")


async def test_an_uncertain_outcomes_reason_is_quoted_without_a_double_stop(
    workspace: Path,
) -> None:
    config = Config()
    rt = Runtime(
        workspace,
        config=config,
        db_path=workspace.parent / "zuno.db",
        approver=ApproveAll(),
        tools=[*builtin_tools(config), _Lost()],
    )
    try:
        session = rt.open_session()
        (result,) = await rt.dispatch(session, [CallRequest("lost", {})])
    finally:
        rt.close()
    assert result.outcome is Outcome.UNCERTAIN
    assert "The connection dropped after the request was sent" in result.output
    assert ".." not in result.output, result.output
