"""A hook that breaks (``fail``), and the hooks told of approvals and sessions (Python API)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hook_scripts import hook_command, logging_hook, read_log

from zuno.config.loading import Config, ConfigError, validate_config
from zuno.core.declarations import BlockKind, Outcome
from zuno.policy.approvals import ApprovalDecision, ApprovalRequest, CallbackApprover
from zuno.session.runtime import Runtime

sys.path.insert(0, str(Path(__file__).parents[1] / "core"))

from probe_tools import Recorder, probe_tools

pytestmark = pytest.mark.anyio

SLEEPS = "import time; time.sleep(60)"
EXITS = "sys.exit(3)"


def runtime(
    workspace: Path, tmp_path: Path, hooks: dict[str, Any], rec: Recorder, **kw: Any
) -> Runtime:
    config = Config.model_validate({"hooks": hooks, **kw.pop("config", {})})
    return Runtime(
        workspace, config=config, db_path=tmp_path / "z.db", tools=probe_tools(rec), **kw
    )


def failed_events(rt: Runtime, session_id: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.events(session_id) if e.kind == "hook.failed"]


@pytest.mark.parametrize(("body", "why"), [(SLEEPS, "timed out"), (EXITS, "status 3")])
@pytest.mark.parametrize("fail", [None, "closed"])
async def test_a_broken_before_hook_denies_by_default_and_when_closed(
    workspace: Path, tmp_path: Path, body: str, why: str, fail: str | None
) -> None:
    settings: dict[str, Any] = {"timeout": 0.5} | ({"fail": fail} if fail else {})
    rec = Recorder()
    rt = runtime(
        workspace, tmp_path, {"before": [hook_command(tmp_path, "b", body, **settings)]}, rec
    )
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "t"})
    assert result.block_kind is BlockKind.DENIED and why in result.output
    assert rec.events == []
    (failed,) = failed_events(rt, s.session_id)
    assert failed["phase"] == "before" and failed["fail"] == "closed" and why in failed["reason"]


@pytest.mark.parametrize(("body", "why"), [(SLEEPS, "timed out"), (EXITS, "status 3")])
async def test_a_broken_fail_open_hook_is_ignored_with_a_warning(
    workspace: Path, tmp_path: Path, body: str, why: str
) -> None:
    rec = Recorder()
    broken = hook_command(tmp_path, "b", body, timeout=0.5, fail="open")
    rt = runtime(workspace, tmp_path, {"before": [broken], "after": [broken]}, rec)
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "t"})
    assert result.outcome is Outcome.OK and result.output == "done t"
    assert [tag for what, tag, _ in rec.events if what == "start"] == ["t"]
    failed = failed_events(rt, s.session_id)
    assert [(f["phase"], f["fail"]) for f in failed] == [("before", "open"), ("after", "open")]
    assert all(why in f["reason"] for f in failed)


async def test_a_broken_after_hook_withholds_the_result_by_default(
    workspace: Path, tmp_path: Path
) -> None:
    rec = Recorder()
    rt = runtime(workspace, tmp_path, {"after": [hook_command(tmp_path, "a", EXITS)]}, rec)
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "t"})
    assert result.outcome is Outcome.OK and "withheld" in result.output
    assert "done t" not in result.output


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ('{"decision": "ask"}', "after hook"),
        ('{"arguments": {"tag": "x"}}', "after hook"),
        ('{"decision": "allow", "arguments": [1]}', "arguments"),
    ],
)
async def test_answers_a_phase_cannot_take_count_as_failures(
    workspace: Path, tmp_path: Path, answer: str, why: str
) -> None:
    rec = Recorder()
    phase = "before" if "[1]" in answer else "after"
    hook = hook_command(tmp_path, "odd", f"print({answer!r})")
    rt = runtime(workspace, tmp_path, {phase: [hook]}, rec)
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "t"})
    (failed,) = failed_events(rt, s.session_id)
    assert why in failed["reason"]
    assert result.is_error and "done t" not in result.output


async def test_approval_hooks_see_the_request_and_the_answer(
    workspace: Path, tmp_path: Path
) -> None:
    rec = Recorder()
    log = tmp_path / "approvals.log"

    def approver(request: ApprovalRequest) -> ApprovalDecision:
        # The asked hook has already run when the approver is consulted.
        assert [p["phase"] for p in read_log(log)] == ["approval_asked"]
        return ApprovalDecision.APPROVE_ONCE

    hooks = {
        "approval_asked": [logging_hook(tmp_path, log)],
        "approval_answered": [logging_hook(tmp_path, log)],
    }
    rt = runtime(workspace, tmp_path, hooks, rec, approver=CallbackApprover(approver))
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "w", "effect": "side_effecting"})
    assert result.outcome is Outcome.OK
    asked, answered = read_log(log)
    for payload in (asked, answered):
        assert payload["session_id"] == s.session_id and payload["call_id"] == result.call_id
        assert payload["tool"] == "probe" and payload["arguments"]["tag"] == "w"
        assert payload["reason"].startswith("strict mode")
        assert payload["declaration"]["effect"] == "side_effecting"
    assert asked["phase"] == "approval_asked" and "decision" not in asked
    assert answered["phase"] == "approval_answered" and answered["decision"] == "once"


async def test_session_hooks_fire_on_open_and_close(workspace: Path, tmp_path: Path) -> None:
    rec = Recorder()
    log = tmp_path / "sessions.log"
    hooks = {
        "session_start": [logging_hook(tmp_path, log)],
        "session_end": [logging_hook(tmp_path, log)],
    }
    rt = runtime(workspace, tmp_path, hooks, rec)
    home = rt.workspace
    s = rt.open_session(agent="explore")
    (start,) = read_log(log)
    assert start == {
        "phase": "session_start",
        "session_id": s.session_id,
        "agent": "explore",
        "workspace": str(home),
        "resumed": False,
        "parent_call_id": None,
        "depth": 0,
    }
    rt.close()
    _, end = read_log(log)
    assert end == {"phase": "session_end", "session_id": s.session_id, "state": "idle"}

    again = runtime(workspace, tmp_path, hooks, rec)
    again.open_session(s.session_id)
    again.close()
    resumed = read_log(log)[2]
    assert resumed["phase"] == "session_start" and resumed["resumed"] is True


async def test_a_broken_session_hook_stops_nothing_and_is_recorded(
    workspace: Path, tmp_path: Path
) -> None:
    rec = Recorder()
    hooks = {"session_start": [hook_command(tmp_path, "s", EXITS)]}
    rt = runtime(workspace, tmp_path, hooks, rec)
    s = rt.open_session()
    assert (await rt.call(s, "probe", {"tag": "t"})).outcome is Outcome.OK
    (failed,) = failed_events(rt, s.session_id)
    assert failed["phase"] == "session_start" and "status 3" in failed["reason"]


@pytest.mark.parametrize(
    ("hooks", "words"),
    [
        ({"session_start": [{"command": "true", "fail": "closed"}]}, "fail"),
        ({"approval_asked": [{"command": "true", "fail": "open"}]}, "fail"),
        ({"session_end": [{"command": "true", "tools": ["shell"]}]}, "tools"),
        ({"before": [{"command": "true", "fail": "maybe"}]}, "fail"),
    ],
)
def test_settings_that_mean_nothing_are_refused(hooks: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        validate_config({"hooks": hooks}, "zuno.json")
