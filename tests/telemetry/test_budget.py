"""Tokens and cost per session, and the ``--max-budget`` cap, against a real model server.

The scripted OpenAI-compatible server on 127.0.0.1 reports usage with every
reply (1,000 tokens in, 500 out). At the configured price (USD 1,000 and
2,000 per million) each reply costs exactly USD 2.00, so the tests can say
which request the cap must stop: judged by the requests the server received,
by what ``zuno show`` reads from the store, and by the exit status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))

from fake_api import FakeModelServer, Reply

from zuno.agent.loop import AgentLoop, TurnStatus, provider_for
from zuno.config.loading import Config
from zuno.durability.store import open_store
from zuno.policy.approvals import ApproveAll
from zuno.policy.budget import Budget, SessionUsage, session_budget, session_usage
from zuno.session.runtime import Runtime

MODEL = "openai:fake-model"
PRICE = {"input": 1000.0, "output": 2000.0}  # USD per million tokens: USD 2.00 a reply


def _reading(n: int) -> Reply:
    return Reply(
        text=f"Step {n}.",
        tool_calls=[(f"c{n}", "read", '{"path": "notes.txt"}')],
        input_tokens=1000,
        output_tokens=500,
    )


class Cli:
    def __init__(self, workspace: Path, server: FakeModelServer) -> None:
        self.workspace = workspace
        self.env = {
            **os.environ,
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "sk-test",
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "zuno", *args],
            cwd=self.workspace,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def show(self, session_id: str) -> str:
        proc = self.run("show", session_id)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout


def _stored(session_id: str) -> tuple[SessionUsage, list[str | None]]:
    """The session's usage and call outcomes, read from the store the CLI used."""
    store = open_store(None)
    try:
        return session_usage(store, session_id), [c.outcome for c in store.calls(session_id)]
    finally:
        store.close()


def _user_config(data: dict[str, Any]) -> None:
    home = Path(os.environ["ZUNO_CONFIG_HOME"])
    (home / "zuno.json").write_text(json.dumps(data))


@pytest.fixture
def cli(workspace: Path) -> Any:
    (workspace / "notes.txt").write_text("notes\n")
    with FakeModelServer() as server:
        yield Cli(workspace, server), server


def _session_of(stderr: str) -> str:
    import re

    match = re.search(r"(ses_\w+)", stderr)
    assert match, stderr
    return match.group(1)


def test_a_run_stops_at_the_cap_and_resume_keeps_counting(cli: Any) -> None:
    run, server = cli
    _user_config({"models": {MODEL: {"price": PRICE}}})
    server.enqueue(*[_reading(n) for n in range(1, 5)])
    proc = run.run("run", "Read it again and again.", "--model", MODEL, "--max-budget", "5")
    # Three replies cost USD 6.00: the fourth request is never sent.
    assert proc.returncode == 3, proc.stderr
    assert len(server.requests) == 3
    assert "budget of $5.00 is spent" in proc.stderr
    assert "Traceback" not in proc.stderr
    sid = _session_of(proc.stderr)
    usage, outcomes = _stored(sid)
    assert (usage.input_tokens, usage.output_tokens) == (3000, 1500)
    assert usage.cost_usd == pytest.approx(6.0) and usage.cost_known
    # Every reply's calls ran: the turn ended between steps, never inside one.
    assert outcomes == ["ok", "ok", "ok"]

    # Resumed with a higher cap: the count starts at USD 6.00, one more reply fits.
    proc = run.run("resume", sid, "--max-budget", "7")
    assert proc.returncode == 3, proc.stderr
    assert len(server.requests) == 4
    assert _stored(sid)[0].cost_usd == pytest.approx(8.0)
    # At the cap already: nothing is sent at all.
    proc = run.run("resume", sid, "--max-budget", "8")
    assert proc.returncode == 3, proc.stderr
    assert len(server.requests) == 4
    # The cap is stored with the session: a resume that names none keeps it.
    server.enqueue(Reply(text="Done.", input_tokens=1000, output_tokens=500))
    proc = run.run("resume", sid, "Stop now.")
    assert proc.returncode == 3, proc.stderr
    assert "budget of $8.00 is spent" in proc.stderr
    assert len(server.requests) == 4
    # A higher cap replaces it; the session goes on, and is still counted.
    proc = run.run("resume", sid, "--max-budget", "20")
    assert proc.returncode == 0, proc.stderr
    assert len(server.requests) == 5
    assert "usage: 5,000 tokens in, 2,500 out; cost $10.00" in run.show(sid)


def test_headless_run_ends_with_the_budget_status(cli: Any) -> None:
    run, server = cli
    _user_config({"models": {MODEL: {"price": PRICE}}})
    server.enqueue(*[_reading(n) for n in range(1, 5)])
    proc = run.run("run", "Go.", "--model", MODEL, "--max-budget", "3.5", "--json", "--yes")
    assert proc.returncode == 3, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    usage = [e for e in events if e["type"] == "usage"]
    assert [u["cost_usd"] for u in usage] == [pytest.approx(2.0), pytest.approx(2.0)]
    end = events[-1]
    assert end["type"] == "end" and end["status"] == "budget" and end["exit_code"] == 3
    assert end["usage"]["cost_usd"] == pytest.approx(4.0)
    assert len(server.requests) == 2


def test_a_cap_on_a_model_without_a_price_refuses_to_start(cli: Any, workspace: Path) -> None:
    run, server = cli
    server.enqueue(_reading(1))
    # A price in a workspace file the user has not trusted is not honoured.
    (workspace / "zuno.json").write_text(json.dumps({"models": {MODEL: {"price": PRICE}}}))
    for extra in ((), ("--json",)):
        proc = run.run("run", "Go.", "--model", MODEL, "--max-budget", "1", *extra)
        assert proc.returncode == 2, proc.stderr
        assert f"no price is known for {MODEL}" in proc.stderr
    assert server.requests == []
    store = open_store(None)
    try:
        assert store.list_sessions() == []  # refused before a session was made
    finally:
        store.close()
    # Without a cap it runs, and says plainly that the cost is unknown.
    server.enqueue(Reply(text="Hi.", input_tokens=10, output_tokens=5))
    proc = run.run("run", "Go.", "--model", MODEL)
    assert proc.returncode == 0, proc.stderr
    sid = _session_of(proc.stderr)
    assert "cost unknown (no price for openai:fake-model)" in run.show(sid)


def test_the_token_budget_through_the_cli(cli: Any) -> None:
    run, server = cli
    server.enqueue(*[_reading(n) for n in range(1, 5)])
    proc = run.run("run", "Go.", "--model", MODEL, "--max-tokens-budget", "3000")
    assert proc.returncode == 3, proc.stderr
    assert len(server.requests) == 2  # 1,500 tokens a reply
    assert "token budget of 3,000 is spent" in proc.stderr
    # The model has no price: the fix offered is the token cap, never --max-budget.
    assert "--max-tokens-budget N" in proc.stderr and "--max-budget" not in proc.stderr


@pytest.mark.anyio
async def test_child_agents_count_against_the_runtimes_budget(workspace: Path) -> None:
    """Python API: ``runtime.budget``; a task's child agent spends from the same cap."""
    (workspace / "notes.txt").write_text("notes\n")
    with FakeModelServer() as server:
        config = Config.model_validate(
            {
                "providers": {
                    "fake": {"kind": "openai", "base_url": server.openai_base_url, "attempts": 1}
                },
                "models": {"fake:m": {"price": PRICE}},
                "model": "fake:m",
            }
        )
        rt = Runtime(
            workspace, config=config, db_path=workspace.parent / "z.db", approver=ApproveAll()
        )
        os.environ.setdefault("FAKE_API_KEY", "sk-test")
        server.enqueue(
            Reply(
                tool_calls=[("t1", "task", '{"agent": "explore", "prompt": "look"}')],
                input_tokens=1000,
                output_tokens=500,
            ),
            _reading(1),  # the child's first reply: USD 4.00 spent now
            _reading(2),
            _reading(3),
        )
        rt.budget = Budget(max_usd=3.0)
        try:
            state = rt.open_session(agent="build", model="fake:m")
            provider = provider_for(rt, "fake:m")
            try:
                async with rt:
                    outcome = await AgentLoop(rt, state, provider).run("Delegate.")
            finally:
                await provider.aclose()
            total = session_usage(rt.store, state.session_id)
            own = session_usage(rt.store, state.session_id, children=False)
        finally:
            rt.close()
    assert outcome.status is TurnStatus.BUDGET
    assert "budget of $3.00 is spent" in outcome.message
    assert len(server.requests) == 2  # the parent's, then the child's first
    assert own.cost_usd == pytest.approx(2.0)
    assert total.cost_usd == pytest.approx(4.0) and total.requests == 2


def test_spending_that_cannot_be_counted_stops_the_next_request() -> None:
    """A reply without token counts: a cap can no longer be kept, so it fails closed."""
    from zuno.contract.usage import Usage
    from zuno.policy.budget import ModelPrice, step_cost

    price = ModelPrice(input=1.0, output=1.0)
    for budget in (Budget(max_usd=10.0), Budget(max_tokens=100_000)):
        assert budget.stop_reason("x:y", price) is None
        unreported = Usage()
        budget.add(unreported, step_cost(price, unreported), "x:y")
        reason = budget.stop_reason("x:y", price)
        assert reason is not None and "cannot be kept" in reason
    # No price and a cap on dollars: nothing may be sent.
    reason = Budget(max_usd=10.0).stop_reason("x:y", None)
    assert reason is not None and "no price is known for x:y" in reason


def test_a_queued_session_keeps_its_cap_for_the_worker(cli: Any) -> None:
    """`zuno submit --max-budget`: the cap is stored with the queued session and is the one
    its turn runs under; a cap that cannot be kept (no price) is refused at submit."""
    run, _server = cli
    refused = run.run("submit", "Go.", "--model", MODEL, "--max-budget", "5")
    assert refused.returncode == 2 and "price" in refused.stderr, refused.stderr
    _user_config({"models": {MODEL: {"price": PRICE}}})
    proc = run.run(
        "submit", "Go.", "--model", MODEL, "--max-budget", "5", "--max-tokens-budget", "900"
    )
    assert proc.returncode == 0, proc.stderr
    sid = proc.stdout.strip()
    store = open_store(None)
    try:
        budget = session_budget(store, sid, None)
        assert budget is not None and (budget.max_usd, budget.max_tokens) == (5.0, 900)
        # A new cap for one limit replaces that one only.
        again = session_budget(store, sid, Budget(max_usd=7.0))
        assert again is not None and (again.max_usd, again.max_tokens) == (7.0, 900)
        kept = session_budget(store, sid, None)
        assert kept is not None and (kept.max_usd, kept.max_tokens) == (7.0, 900)
    finally:
        store.close()
