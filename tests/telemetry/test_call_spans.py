"""One OpenTelemetry span per call attempt, captured by the SDK's in-memory exporter.

Judged against the store: every call row (blocked, failed, uncertain and
retried ones included) has exactly one span, with the row's times, outcome
and declaration. Through the Python API (a span the program holds open is
the parent) and through the real CLI (``zuno call``, ``zuno batch``) in a
fresh interpreter whose SDK is configured before Zuno starts. Without a
configured SDK nothing of OpenTelemetry is even imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))

from fake_api import FakeModelServer, Reply
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from zuno.agent.loop import AgentLoop, TurnStatus, provider_for
from zuno.config.loading import Config
from zuno.contract.calls import CallRequest
from zuno.contract.tool import (
    Tool,
    ToolArgs,
    ToolContext,
    ToolResult,
    TransientError,
    UncertainOutcome,
)
from zuno.core.declarations import Concurrency, Declaration, Effect, Replay
from zuno.durability.store import open_store
from zuno.durability.store.records import CallRecord
from zuno.policy.approvals import CallbackApprover
from zuno.session.builtin_tools import builtin_tools
from zuno.session.runtime import Runtime

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (set once: the API allows no second one)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)
    yield _EXPORTER
    provider.shutdown()  # later tests in this process record nothing


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    exporter.clear()
    yield exporter
    exporter.clear()


class _NoArgs(ToolArgs):
    pass


class LostTool(Tool[_NoArgs]):
    """Side-effecting; its effect cannot be known (the outcome is uncertain)."""

    name: ClassVar[str] = "lost"
    description: ClassVar[str] = "Test tool."
    args_model = _NoArgs
    declaration: ClassVar[Declaration] = Declaration(
        Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.EXCLUSIVE
    )

    async def run(self, args: _NoArgs, ctx: ToolContext) -> ToolResult:
        raise UncertainOutcome("the connection dropped after the request was sent")


class BusyOnceTool(Tool[_NoArgs]):
    """Read-only and Safe: busy the first time, fine the second (two attempts)."""

    name: ClassVar[str] = "busy_once"
    description: ClassVar[str] = "Test tool."
    args_model = _NoArgs
    declaration: ClassVar[Declaration] = Declaration(
        Effect.READ_ONLY, Replay.SAFE, Concurrency.PARALLEL_SAFE
    )

    def __init__(self) -> None:
        self.runs = 0

    async def run(self, args: _NoArgs, ctx: ToolContext) -> ToolResult:
        self.runs += 1
        if self.runs == 1:
            raise TransientError("busy")
        return ToolResult("fine")


class HangTool(Tool[_NoArgs]):
    """Side-effecting; runs until it is cancelled."""

    name: ClassVar[str] = "hang"
    description: ClassVar[str] = "Test tool."
    args_model = _NoArgs
    declaration: ClassVar[Declaration] = Declaration(
        Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.EXCLUSIVE
    )

    def __init__(self) -> None:
        self.running = anyio.Event()

    async def run(self, args: _NoArgs, ctx: ToolContext) -> ToolResult:
        self.running.set()
        await anyio.sleep_forever()
        raise AssertionError("not reached")


def _by_attempt(spans: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    keyed: dict[tuple[str, int], dict[str, Any]] = {}
    for span in spans:
        key = (span["attributes"]["zuno.call_id"], span["attributes"]["zuno.attempt"])
        assert key not in keyed, f"two spans for {key}"
        keyed[key] = span
    return keyed


def _plain(span: ReadableSpan) -> dict[str, Any]:
    parent = span.parent
    return {
        "name": span.name,
        "attributes": dict(span.attributes or {}),
        "start": span.start_time,
        "end": span.end_time,
        "status": span.status.status_code.name,
        "trace_id": span.context.trace_id if span.context else None,
        "parent": parent.span_id if parent is not None else None,
    }


def _check_against_rows(spans: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """Exactly one span per call row (attempt), agreeing with the row on every point."""
    keyed = _by_attempt([s for s in spans if s["name"].startswith("zuno.call ")])
    assert set(keyed) == {(r["call_id"], r["attempt"]) for r in rows}
    for row in rows:
        span = keyed[(row["call_id"], row["attempt"])]
        attrs = span["attributes"]
        assert span["name"] == f"zuno.call {row['tool']}"
        assert attrs["zuno.contract.tool"] == row["tool"]
        assert attrs["zuno.session_id"] == row["session_id"]
        assert attrs["zuno.outcome"] == row["outcome"]
        assert attrs.get("zuno.block_kind") == row["block_kind"]
        for key in ("effect", "replay", "concurrency"):
            assert attrs.get(f"zuno.{key}") == row[key]
        assert span["start"] == int(row["started_at"] * 1_000_000_000)
        assert span["end"] == int(row["finished_at"] * 1_000_000_000)
        failed = row["outcome"] in ("error", "uncertain")
        assert span["status"] == ("ERROR" if failed else "UNSET")


def _row(call: CallRecord) -> dict[str, Any]:
    return {
        "call_id": call.call_id,
        "session_id": call.session_id,
        "attempt": call.attempt,
        "tool": call.tool,
        "outcome": call.outcome,
        "block_kind": call.block_kind,
        "effect": call.effect,
        "replay": call.replay,
        "concurrency": call.concurrency,
        "started_at": call.started_at,
        "finished_at": call.finished_at,
    }


@pytest.mark.anyio
async def test_every_attempt_of_a_step_has_one_span_under_the_programs_span(
    spans: InMemorySpanExporter, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("notes\n")
    config = Config.model_validate({"replay": {"base_delay": 0, "max_delay": 0}})
    tools = [*builtin_tools(config), LostTool(), BusyOnceTool()]
    rt = Runtime(
        workspace,
        config=config,
        db_path=workspace.parent / "zuno.db",
        approver=CallbackApprover(lambda request: request.tool == "lost"),
        tools=tools,
    )
    try:
        session = rt.open_session()
        outer = trace.get_tracer("the-program").start_span("handle request")
        with trace.use_span(outer, end_on_exit=True):
            results = await rt.dispatch(
                session,
                [
                    CallRequest("read", {"path": "notes.txt"}),
                    CallRequest("read", {"path": "missing.txt"}),
                    CallRequest("levitate", {}),
                    CallRequest("write", {"path": "out.txt", "content": "x"}),
                    CallRequest("lost", {}),
                    CallRequest("busy_once", {}),
                ],
            )
        rows = [_row(c) for c in rt.store.calls(session.session_id)]
    finally:
        rt.close()
    assert [r.outcome.value for r in results] == [
        "ok",
        "error",
        "blocked",
        "blocked",
        "uncertain",
        "ok",
    ]
    assert not (workspace / "out.txt").exists()
    captured = [_plain(s) for s in spans.get_finished_spans()]
    _check_against_rows(captured, rows)
    assert len(rows) == 7  # busy_once ran twice
    (program,) = [s for s in captured if s["name"] == "handle request"]
    outer_id = outer.get_span_context().span_id
    for span in captured:
        if span["name"].startswith("zuno.call "):
            assert span["parent"] == outer_id
            assert span["trace_id"] == program["trace_id"]
    kinds = {
        s["attributes"]["zuno.contract.tool"]: s["attributes"].get("zuno.block_kind")
        for s in captured
        if s["name"].startswith("zuno.call ")
    }
    assert kinds["levitate"] == "unavailable"
    assert kinds["write"] == "denied"


@pytest.mark.anyio
async def test_an_agent_turn_holds_its_model_requests_and_calls(
    spans: InMemorySpanExporter, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("notes\n")
    with FakeModelServer() as server:
        config = Config.model_validate(
            {
                "providers": {
                    "fake": {"kind": "openai", "base_url": server.openai_base_url, "attempts": 1}
                },
                "models": {"fake:m": {"price": {"input": 1000.0, "output": 2000.0}}},
            }
        )
        rt = Runtime(workspace, config=config, db_path=workspace.parent / "zuno.db")
        server.enqueue(
            Reply(tool_calls=[("c1", "read", '{"path": "notes.txt"}')], input_tokens=1000),
            Reply(text="It says notes.", input_tokens=2000, output_tokens=500),
        )
        try:
            state = rt.open_session(model="fake:m")
            provider = provider_for(rt, "fake:m")
            try:
                async with rt:
                    outcome = await AgentLoop(rt, state, provider).run("What is in notes.txt?")
            finally:
                await provider.aclose()
            rows = [_row(c) for c in rt.store.calls(state.session_id)]
        finally:
            rt.close()
    assert outcome.status is TurnStatus.ANSWERED
    captured = [_plain(s) for s in spans.get_finished_spans()]
    _check_against_rows(captured, rows)
    (turn,) = [s for s in captured if s["name"] == "zuno.turn build"]
    assert turn["attributes"]["zuno.turn.status"] == "answered"
    assert turn["attributes"]["zuno.session_id"] == state.session_id
    models = [s for s in captured if s["name"] == "zuno.model fake:m"]
    assert [m["attributes"]["gen_ai.usage.input_tokens"] for m in models] == [1000, 2000]
    assert [m["attributes"]["zuno.cost_usd"] for m in models] == [
        pytest.approx(1.0 + 7 * 2000 / 1e6),  # the server's default 7 output tokens
        pytest.approx(2.0 + 1.0),
    ]
    (call,) = [s for s in captured if s["name"] == "zuno.call read"]
    turn_id = next(
        s.context.span_id for s in spans.get_finished_spans() if s.name == "zuno.turn build"
    )
    assert call["parent"] == turn_id
    assert all(m["parent"] == turn_id for m in models)


@pytest.mark.anyio
async def test_a_child_agents_turn_nests_under_its_task_call(
    spans: InMemorySpanExporter, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("notes\n")
    with FakeModelServer() as server:
        config = Config.model_validate(
            {
                "providers": {
                    "fake": {"kind": "openai", "base_url": server.openai_base_url, "attempts": 1}
                },
                "permission": {"rules": [{"tool": "task", "action": "allow"}]},
            }
        )
        rt = Runtime(workspace, config=config, db_path=workspace.parent / "zuno.db")
        server.enqueue(
            Reply(tool_calls=[("t1", "task", '{"agent": "explore", "prompt": "Look."}')]),
            Reply(tool_calls=[("k1", "read", '{"path": "notes.txt"}')]),  # the child
            Reply(text="It says notes."),  # the child's answer
            Reply(text="Done."),
        )
        try:
            state = rt.open_session(model="fake:m")
            provider = provider_for(rt, "fake:m")
            try:
                async with rt:
                    outcome = await AgentLoop(rt, state, provider).run("Delegate.")
            finally:
                await provider.aclose()
            (child,) = rt.store.child_sessions(state.session_id)
            rows = [
                _row(c) for sid in (state.session_id, child.session_id) for c in rt.store.calls(sid)
            ]
        finally:
            rt.close()
    assert outcome.status is TurnStatus.ANSWERED
    finished = spans.get_finished_spans()
    _check_against_rows([_plain(s) for s in finished], rows)
    by_name = {s.name: s for s in finished}
    task, child_turn, read = (
        by_name["zuno.call task"],
        by_name["zuno.turn explore"],
        by_name["zuno.call read"],
    )
    assert task.context is not None and child_turn.context is not None
    assert child_turn.parent is not None and child_turn.parent.span_id == task.context.span_id
    assert read.parent is not None and read.parent.span_id == child_turn.context.span_id
    assert read.attributes is not None and read.attributes["zuno.session_id"] == child.session_id


@pytest.mark.anyio
async def test_a_call_cancelled_while_running_has_an_uncertain_span(
    spans: InMemorySpanExporter, workspace: Path
) -> None:
    hang = HangTool()
    rt = Runtime(
        workspace,
        db_path=workspace.parent / "zuno.db",
        approver=CallbackApprover(lambda request: True),
        tools=[*builtin_tools(), hang],
    )
    try:
        session = rt.open_session()
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.call, session, "hang", {})
            with anyio.fail_after(60):
                await hang.running.wait()
            tg.cancel_scope.cancel()
        rows = [_row(c) for c in rt.store.calls(session.session_id)]
    finally:
        rt.close()
    assert [r["outcome"] for r in rows] == ["uncertain"]
    captured = [_plain(s) for s in spans.get_finished_spans()]
    _check_against_rows(captured, rows)


# A fresh interpreter: the SDK is configured, then the real CLI runs; its spans
# are written to a file as JSON when the command ends (whatever its status).
BOOT = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
out = sys.argv[1]
sys.argv = ["zuno", *sys.argv[2:]]
from zuno.cli.main import main
try:
    main()
finally:
    spans = []
    for s in exporter.get_finished_spans():
        spans.append({
            "name": s.name,
            "attributes": dict(s.attributes or {}),
            "start": s.start_time,
            "end": s.end_time,
            "status": s.status.status_code.name,
            "trace_id": s.context.trace_id,
            "parent": s.parent.span_id if s.parent is not None else None,
        })
    with open(out, "w") as f:
        json.dump(spans, f)
"""


def _zuno(workspace: Path, *args: str, spans: Path) -> str:
    """Run the CLI with the SDK configured; its spans go to ``spans``."""
    argv = [sys.executable, "-c", BOOT, str(spans), *args]
    proc = subprocess.run(
        argv,
        cwd=workspace,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def test_zuno_call_and_batch_make_one_span_per_call(workspace: Path, tmp_path: Path) -> None:
    (workspace / "notes.txt").write_text("notes\n")
    first = tmp_path / "call.json"
    _zuno(workspace, "call", "read", '{"path": "notes.txt"}', spans=first)
    steps = [
        {"tool": "read", "args": {"path": "notes.txt"}},
        {"tool": "read", "args": {"path": "nope.txt"}},
        {"tool": "levitate", "args": {}},
        {"tool": "write", "args": {"path": "out.txt", "content": "x"}},
        {"tool": "shell", "args": {"command": "echo hi > shell.txt"}},
    ]
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    second = tmp_path / "batch.json"
    _zuno(workspace, "batch", str(tmp_path / "steps.json"), spans=second)
    # Nothing was asked (no terminal) and nothing denied ran.
    assert not (workspace / "out.txt").exists() and not (workspace / "shell.txt").exists()
    store = open_store(None)  # the store the commands used ($ZUNO_DB)
    try:
        rows = [_row(c) for ses in store.list_sessions() for c in store.calls(ses.session_id)]
    finally:
        store.close()
    captured = json.loads(first.read_text()) + json.loads(second.read_text())
    _check_against_rows(captured, rows)
    outcomes = sorted((r["tool"], r["outcome"], r["block_kind"]) for r in rows)
    assert outcomes == [
        ("levitate", "blocked", "unavailable"),
        ("read", "error", None),
        ("read", "ok", None),
        ("read", "ok", None),
        ("shell", "blocked", "denied"),
        ("write", "blocked", "denied"),
    ]


PROBE = """
import json, sys
sys.argv = ["zuno", *json.loads(sys.argv[1])]
from zuno.cli.main import main
try:
    main()
except SystemExit:
    pass
loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
sys.__stderr__.write("LOADED " + json.dumps(loaded) + "\\n")
"""


def test_without_an_sdk_nothing_of_opentelemetry_is_loaded(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("notes\n")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(["call", "read", '{"path": "notes.txt"}'])],
        cwd=workspace,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("LOADED ")]
    loaded = json.loads(line.removeprefix("LOADED "))
    assert "opentelemetry.trace" not in loaded
    assert not [m for m in loaded if m.startswith("opentelemetry.sdk")]


def test_the_api_alone_records_nothing(workspace: Path) -> None:
    """The API imported (as provider SDKs do) but no provider installed: no tracer is used."""
    code = (
        "import asyncio, sys\n"
        "import opentelemetry.trace as t\n"
        "from pathlib import Path\n"
        "from zuno.durability import telemetry\n"
        "from zuno.session.runtime import Runtime\n"
        "rt = Runtime(Path('.'), db_path=Path('z.db'))\n"
        "s = rt.open_session()\n"
        "r = asyncio.run(rt.call(s, 'read', {'path': 'notes.txt'}))\n"
        "rt.close()\n"
        "print(r.outcome.value, telemetry.tracing_enabled(),"
        " type(t.get_tracer_provider()).__name__,"
        " any(m.startswith('opentelemetry.sdk') for m in sys.modules))\n"
    )
    (workspace / "notes.txt").write_text("notes\n")
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=workspace, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok", "False", "ProxyTracerProvider", "False"]
