"""The call contract under issue 9: inspection, completed commands, refusals, cancellations.

- Only calls that observe the workspace or processes satisfy the inspection
  rule, and delegating calls are gated like side-effecting ones.
- A command that ran to its end is ``ok``, its exit status first in its result.
- Arguments refused after validation are ``blocked: invalid_arguments``.
- A cancelled or timed-out command keeps what it printed; a cancelled question
  is ``error`` (nothing could have happened).

Everything goes through a real :class:`Runtime` on a real SQLite file, real
sandboxes and, for the exit status, the real ``zuno`` command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types

from zuno.agent.delegation import MAX_DEPTH
from zuno.config.loading import Config
from zuno.config.mcp import McpServerSettings
from zuno.core.declarations import BlockKind, Effect, Outcome
from zuno.dispatch.dispatcher import CallRequest
from zuno.dispatch.session_state import SessionState
from zuno.durability.recovery import inspection_block, pending_notice
from zuno.integrations.mcp.remote import choose_declaration
from zuno.policy.approvals import ApproveAll
from zuno.session.builtin_tools import builtin_tools
from zuno.session.questions import Answer, Question
from zuno.session.runtime import Runtime
from zuno.tools.question import CallbackQuestioner

pytestmark = pytest.mark.anyio

SANDBOXES = ["bubblewrap", "landlock"]


def make_runtime(workspace: Path, tmp_path: Path, **config: Any) -> Runtime:
    return Runtime(
        workspace,
        config=Config.model_validate(config),
        db_path=tmp_path / "zuno.db",
        approver=ApproveAll(),
    )


async def leave_uncertain(rt: Runtime, s: SessionState) -> str:
    """A Never call whose outcome is unknown: a command killed at its deadline."""
    result = await rt.call(
        s, "shell", {"command": "echo ran >> effects.txt; sleep 30", "timeout": 1}
    )
    assert result.outcome is Outcome.UNCERTAIN
    return result.call_id


# 1. Only observing calls inspect; delegation is gated ------------------------------


def _observes(tool_name: str, args: dict[str, Any]) -> bool:
    config = Config.model_validate({"tools": {"lsp": True, "execute": True}})
    (tool,) = [t for t in builtin_tools(config) if t.name == tool_name]
    return tool.declare(tool.args_model.model_validate(args)).observes


OBSERVING: list[tuple[str, dict[str, Any]]] = [
    ("read", {"path": "a.txt"}),
    ("glob", {"pattern": "*"}),
    ("grep", {"pattern": "x"}),
    ("lsp", {"action": "diagnostics", "path": "a.py"}),
    ("job", {}),
    ("bg", {"action": "list"}),
    ("bg", {"action": "output", "job_id": "job_x"}),
    ("bg", {"action": "wait", "job_id": "job_x"}),
]
NOT_OBSERVING: list[tuple[str, dict[str, Any]]] = [
    ("bg", {"action": "cancel", "job_id": "job_x"}),
    ("skill", {}),
    ("todo_get", {}),
    ("plan_get", {}),
    ("goal_get", {}),
    ("webfetch", {"url": "http://127.0.0.1:9/"}),
    ("web_search", {"queries": ["x"]}),
    ("write", {"path": "a", "content": "x"}),
    ("shell", {"command": "ls"}),
    ("task", {"agent": "explore", "prompt": "x"}),
    ("council_run", {"question": "x"}),
    ("question", {"questions": [{"header": "h", "question": "q"}]}),
]


@pytest.mark.parametrize(("tool", "args"), OBSERVING)
def test_calls_that_look_at_the_workspace_or_processes_observe(
    tool: str, args: dict[str, Any]
) -> None:
    assert _observes(tool, args)


@pytest.mark.parametrize(("tool", "args"), NOT_OBSERVING)
def test_other_calls_do_not_observe(tool: str, args: dict[str, Any]) -> None:
    assert not _observes(tool, args)


def test_an_mcp_tool_never_observes_on_a_servers_word() -> None:
    remote = types.Tool(
        name="peek",
        input_schema={"type": "object"},
        annotations=types.ToolAnnotations(read_only_hint=True),
    )
    settings = McpServerSettings(command="true", trusted=True)
    chosen = choose_declaration(remote, settings).declaration
    assert chosen.effect is Effect.READ_ONLY and not chosen.observes


DEMO_SERVER = Path(__file__).parents[1] / "mcp" / "mcp_demo_server.py"


def _demo_server(tmp_path: Path, **settings: Any) -> dict[str, Any]:
    server = {
        "command": sys.executable,
        "args": [str(DEMO_SERVER)],
        "env": {"DEMO_MARKS": str(tmp_path / "marks")},
        **settings,
    }
    return {"mcp": {"servers": {"demo": server}}}


@pytest.mark.parametrize(
    ("settings", "counts"),
    [
        ({"trusted": True}, False),
        ({"tools": {"lookup": {"effect": "read_only", "observes": True}}}, True),
    ],
    ids=["trusted-hint", "configured"],
)
async def test_an_mcp_tool_inspects_only_when_configured_to(
    workspace: Path, tmp_path: Path, settings: dict[str, Any], counts: bool
) -> None:
    rt = make_runtime(workspace, tmp_path, **_demo_server(tmp_path, **settings))
    s = rt.open_session()
    async with rt:
        await leave_uncertain(rt, s)
        looked = await rt.call(s, "mcp__demo__lookup", {"key": "k"})
        assert looked.outcome is Outcome.OK
        assert looked.declaration is not None
        assert looked.declaration.effect is Effect.READ_ONLY
        write = await rt.call(s, "write", {"path": "x.txt", "content": "x"})
    assert (write.outcome is Outcome.OK) is counts, write.output
    assert (workspace / "x.txt").exists() is counts
    rt.close()


@pytest.mark.parametrize(
    ("tool", "args"),
    [("todo_get", {}), ("skill", {}), ("plan_get", {}), ("goal_get", {})],
)
async def test_bookkeeping_reads_do_not_satisfy_the_inspection_rule(
    workspace: Path, tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    await leave_uncertain(rt, s)
    looked = await rt.call(s, tool, args)
    assert looked.outcome is Outcome.OK
    refused = await rt.call(s, "write", {"path": "x.txt", "content": "x"})
    assert refused.outcome is Outcome.BLOCKED and refused.block_kind is BlockKind.DENIED
    assert not (workspace / "x.txt").exists()
    rt.close()


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("read", {"path": "effects.txt"}),
        ("glob", {"pattern": "*.txt"}),
        ("grep", {"pattern": "ran"}),
        ("job", {}),
        ("bg", {"action": "list"}),
    ],
)
async def test_an_observing_call_satisfies_the_inspection_rule(
    workspace: Path, tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    await leave_uncertain(rt, s)
    assert (await rt.call(s, tool, args)).outcome is Outcome.OK
    allowed = await rt.call(s, "write", {"path": "x.txt", "content": "x"})
    assert allowed.outcome is Outcome.OK, allowed.output
    assert (workspace / "x.txt").read_text() == "x"
    rt.close()


async def test_an_inspection_counts_from_the_store_in_a_new_process(
    workspace: Path, tmp_path: Path
) -> None:
    """The rule is a query: a fresh runtime on the same file sees the inspection."""
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    await leave_uncertain(rt, s)
    assert inspection_block(rt.store, s.session_id) is not None
    await rt.call(s, "todo_get", {})
    assert inspection_block(rt.store, s.session_id) is not None
    await rt.call(s, "grep", {"pattern": "ran"})
    rt.close()
    rt2 = make_runtime(workspace, tmp_path)
    assert inspection_block(rt2.store, s.session_id) is None
    rt2.close()


async def test_a_task_is_gated_while_a_failure_is_uninspected(
    workspace: Path, tmp_path: Path
) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    await leave_uncertain(rt, s)
    refused = await rt.call(s, "task", {"agent": "build", "prompt": "write x.txt"})
    assert refused.outcome is Outcome.BLOCKED and refused.block_kind is BlockKind.DENIED
    assert rt.store.child_sessions(s.session_id) == []
    rt.close()


async def test_a_council_is_gated_while_a_failure_is_uninspected(
    workspace: Path, tmp_path: Path
) -> None:
    rt = make_runtime(
        workspace, tmp_path, council={"members": ["explore", "build"], "agents": ["build"]}
    )
    s = rt.open_session()
    await leave_uncertain(rt, s)
    refused = await rt.call(s, "council_run", {"question": "what changed?"})
    assert refused.outcome is Outcome.BLOCKED and refused.block_kind is BlockKind.DENIED
    assert rt.store.child_sessions(s.session_id) == []
    rt.close()


# 2. A command that ran to its end is a completed call ------------------------------


@pytest.mark.parametrize("kind", SANDBOXES)
async def test_a_nonzero_exit_is_a_completed_call(
    workspace: Path, tmp_path: Path, kind: str
) -> None:
    rt = make_runtime(workspace, tmp_path, sandbox={"kind": kind})
    s = rt.open_session()
    result = await rt.call(s, "shell", {"command": "echo out; echo err >&2; exit 3"})
    assert result.outcome is Outcome.OK
    assert result.output.splitlines()[0] == "[exit code 3]"
    assert "out" in result.output and "err" in result.output
    (row,) = rt.store.calls(s.session_id)
    assert row.outcome == "ok" and not row.is_error
    assert (row.result or "").splitlines()[0] == "[exit code 3]"
    (finished,) = [e for e in rt.store.events(s.session_id) if e.kind == "call.finished"]
    assert finished.data["exit_status"] == 3
    # Nothing to recover, nothing to inspect: the next change goes through at once.
    assert pending_notice(rt.store, s.session_id) is None
    allowed = await rt.call(s, "write", {"path": "x.txt", "content": "x"})
    assert allowed.outcome is Outcome.OK
    rt.close()


@pytest.mark.parametrize("kind", SANDBOXES)
async def test_a_command_killed_by_a_signal_is_completed_too(
    workspace: Path, tmp_path: Path, kind: str
) -> None:
    rt = make_runtime(workspace, tmp_path, sandbox={"kind": kind})
    s = rt.open_session()
    result = await rt.call(s, "shell", {"command": "echo before; kill -KILL $$"})
    assert result.outcome is Outcome.OK
    # Seen directly, or as 128+9 through a sandbox's init process.
    first = result.output.splitlines()[0]
    assert first == "[killed by SIGKILL]" or first.startswith("[exit code 137 (128+9"), first
    assert result.data is not None and result.data["exit_status"] in ("SIGKILL", 137)
    assert "before" in result.output
    rt.close()


def _cli(workspace: Path, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zuno", *args],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(db)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cli_exits_1_on_a_nonzero_status_with_an_ok_outcome(
    workspace: Path, tmp_path: Path
) -> None:
    # Allowed by a rule, so no --yes is needed (stdin is not a terminal).
    (workspace / "zuno.json").write_text(
        json.dumps(
            {"permission": {"rules": [{"tool": "shell", "pattern": "exit", "action": "allow"}]}}
        )
    )
    db = tmp_path / "cli.db"
    assert _cli(workspace, db, "trust", "--yes").returncode == 0
    failed = _cli(workspace, db, "call", "shell", '{"command": "exit 4"}', "--json")
    assert failed.returncode == 1, failed.stderr
    body = json.loads(failed.stdout)
    assert body["outcome"] == "ok" and not body["is_error"]
    assert body["result"].splitlines()[0] == "[exit code 4]"
    assert body["data"]["exit_status"] == 4
    passed = _cli(workspace, db, "call", "shell", '{"command": "exit 0"}', "--json")
    assert passed.returncode == 0, passed.stderr
    assert json.loads(passed.stdout)["outcome"] == "ok"
    # What the store says, through the CLI: both completed, no recovery owed.
    sessions = json.loads(_cli(workspace, db, "sessions", "--json").stdout)
    outcomes = [
        c["outcome"]
        for session in sessions
        for c in json.loads(_cli(workspace, db, "show", session["session_id"], "--json").stdout)[
            "calls"
        ]
    ]
    assert outcomes == ["ok", "ok"]


# 3. Arguments refused after validation are blocked ---------------------------------


async def _blocked(rt: Runtime, s: SessionState, tool: str, args: dict[str, Any]) -> None:
    result = await rt.call(s, tool, args)
    assert result.outcome is Outcome.BLOCKED, result.output
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    kinds = [e.kind for e in rt.store.events(s.session_id) if e.call_id == result.call_id]
    assert "dispatch.blocked" in kinds
    row = [c for c in rt.store.calls(s.session_id) if c.call_id == result.call_id][-1]
    assert row.outcome == "blocked" and row.block_kind == "invalid_arguments"


async def _changes_still_allowed(rt: Runtime, s: SessionState, workspace: Path) -> None:
    # A refusal is not a failure: no inspection is owed, no notice is due.
    assert pending_notice(rt.store, s.session_id) is None
    allowed = await rt.call(s, "write", {"path": "after.txt", "content": "x"})
    assert allowed.outcome is Outcome.OK, allowed.output


async def test_a_timeout_over_the_maximum_is_blocked(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path, sandbox={"timeout_default": 10, "timeout_max": 30})
    s = rt.open_session()
    await _blocked(rt, s, "shell", {"command": "touch ran.txt", "timeout": 31})
    await _blocked(rt, s, "shell", {"command": "touch ran.txt", "timeout": 31, "background": True})
    await _blocked(rt, s, "shell", {"command": "touch ran.txt", "workdir": "missing"})
    assert not (workspace / "ran.txt").exists()
    await _changes_still_allowed(rt, s, workspace)
    rt.close()


async def test_execute_of_a_missing_program_is_blocked(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path, tools={"execute": True})
    s = rt.open_session()
    await _blocked(rt, s, "execute", {"argv": ["zuno-no-such-program"]})
    await _blocked(rt, s, "execute", {"argv": ["./not-here"]})
    await _changes_still_allowed(rt, s, workspace)
    rt.close()


@pytest.mark.parametrize(
    "args",
    [
        {"agent": "explore", "prompt": "x", "tools": ["read", "shell"]},
        {"agent": "wizard", "prompt": "x"},
    ],
    ids=["tools-the-parent-lacks", "unknown-agent"],
)
async def test_a_task_the_parent_cannot_give_is_blocked(
    workspace: Path, tmp_path: Path, args: dict[str, Any]
) -> None:
    rt = make_runtime(workspace, tmp_path, agents={"lead": {"tools": ["read", "task", "write"]}})
    s = rt.open_session(agent="lead")
    await _blocked(rt, s, "task", args)
    assert rt.store.child_sessions(s.session_id) == []
    await _changes_still_allowed(rt, s, workspace)
    rt.close()


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("task", {"agent": "explore", "prompt": "x"}),
        ("task", {"agent": "explore", "prompt": "x", "background": True}),
        ("council_run", {"question": "x"}),
    ],
)
async def test_delegation_past_the_depth_is_blocked(
    workspace: Path, tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    rt = make_runtime(
        workspace, tmp_path, council={"members": ["explore", "build"], "agents": ["build"]}
    )
    deep = rt.open_session(agent="build", depth=MAX_DEPTH)
    async with rt:
        await _blocked(rt, deep, tool, args)
    assert rt.store.child_sessions(deep.session_id) == []
    rt.close()


# 4. Cancelled and timed-out calls ---------------------------------------------------


@pytest.mark.parametrize("kind", SANDBOXES)
async def test_a_timed_out_command_keeps_its_head_and_tail(
    workspace: Path, tmp_path: Path, kind: str
) -> None:
    rt = make_runtime(
        workspace,
        tmp_path,
        sandbox={"kind": kind},
        tool_output={"max_bytes": 4096, "max_lines": 200},
    )
    s = rt.open_session()
    command = "echo FIRST; seq 1 20000; echo LAST; sleep 30"
    result = await rt.call(s, "shell", {"command": command, "timeout": 2})
    assert result.outcome is Outcome.UNCERTAIN
    (row,) = rt.store.calls(s.session_id)
    text = row.result or ""
    assert text.splitlines()[0].startswith("[timed out after 2 s")
    assert "FIRST" in text and "LAST" in text
    assert len(text.encode()) <= 4096
    rt.close()


async def _cancel_when(
    rt: Runtime,
    s: SessionState,
    requests: Sequence[CallRequest],
    ready: Any,
) -> None:
    """Dispatch requests, and cancel the dispatch once ready() says so (bounded wait)."""
    async with anyio.create_task_group() as tg:

        async def dispatch() -> None:
            await rt.dispatch(s, requests)

        tg.start_soon(dispatch)
        for _ in range(1200):  # at most 120 s on a loaded machine
            if ready():
                break
            await anyio.sleep(0.1)
        else:
            pytest.fail("the call never got going")
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("kind", SANDBOXES)
async def test_a_cancelled_command_keeps_its_output(
    workspace: Path, tmp_path: Path, kind: str
) -> None:
    rt = make_runtime(
        workspace,
        tmp_path,
        sandbox={"kind": kind},
        tool_output={"max_bytes": 4096, "max_lines": 200},
    )
    s = rt.open_session()
    marker = workspace / "printed.txt"
    command = "echo FIRST; seq 1 20000; echo LAST; touch printed.txt; sleep 60"
    await _cancel_when(rt, s, [CallRequest("shell", {"command": command})], marker.exists)
    (row,) = rt.store.calls(s.session_id)
    assert row.outcome == "uncertain"
    text = row.result or ""
    assert text.splitlines()[0].startswith("[cancelled while running")
    # Head and tail of what it printed, within the limits; the whole of it in the artifact.
    assert "FIRST" in text and "LAST" in text
    assert len(text.encode()) <= 4096
    assert row.artifact is not None
    assert (await anyio.Path(row.artifact).read_text()).count("\n") >= 20002
    rt.close()


async def test_a_cancelled_question_is_an_error(workspace: Path, tmp_path: Path) -> None:
    asked = anyio.Event()

    async def never_answer(questions: Sequence[Question]) -> list[Answer]:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    rt = make_runtime(workspace, tmp_path)
    rt.questioner = CallbackQuestioner(never_answer)
    s = rt.open_session()
    request = CallRequest("question", {"questions": [{"header": "h", "question": "which?"}]})
    await _cancel_when(rt, s, [request], asked.is_set)
    (row,) = rt.store.calls(s.session_id)
    assert row.outcome == "error"
    assert "nothing" in (row.result or "").lower()
    # Nothing could have changed: no inspection is owed and no recovery notice names it.
    assert inspection_block(rt.store, s.session_id) is None
    assert pending_notice(rt.store, s.session_id) is None
    written = await rt.call(s, "write", {"path": "after.txt", "content": "x"})
    assert written.outcome is Outcome.OK, written.output
    rt.close()
