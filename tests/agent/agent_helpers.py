"""Shared setup for the agent loop tests: a runtime whose model is the fake server."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from fake_api import FakeModelServer

from zuno.agent.loop import AgentLoop, TurnOutcome, provider_for
from zuno.config.loading import Config
from zuno.policy.approvals import ApproveAll, Approver
from zuno.session.runtime import Runtime

Kind = Literal["openai", "anthropic"]
MODEL = "fake:test-model"


def make_runtime(
    workspace: Path,
    server: FakeModelServer,
    *,
    kind: Kind = "openai",
    approver: Approver | None = None,
    **config: Any,
) -> Runtime:
    """A runtime on a store in ``workspace/../``, with provider ``fake`` pointing at the server."""
    url = server.openai_base_url if kind == "openai" else server.anthropic_base_url
    providers = {"fake": {"kind": kind, "base_url": url, "attempts": 1}}
    cfg = Config.model_validate({"providers": providers, **config})
    return Runtime(
        workspace,
        config=cfg,
        db_path=workspace.parent / "zuno.db",
        approver=approver or ApproveAll(),
    )


async def run_turn(
    rt: Runtime,
    prompt: str | None,
    *,
    agent: str = "build",
    session_id: str | None = None,
    max_steps: int | None = None,
) -> TurnOutcome:
    """One turn of ``agent`` on the fake model, in a new session or a stored one."""
    state = rt.open_session(session_id, agent=agent, model=MODEL)
    provider = provider_for(rt, MODEL)
    try:
        async with rt:
            return await AgentLoop(rt, state, provider, max_steps=max_steps).run(prompt)
    finally:
        await provider.aclose()
