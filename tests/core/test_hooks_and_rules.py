"""Hooks (commands and callables) and permission rule matching."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from probe_tools import Recorder, probe_tools
from zuno.config.loading import Config
from zuno.config.permission import PermissionRule
from zuno.core.declarations import BlockKind, Outcome
from zuno.dispatch.dispatcher import CallRequest
from zuno.policy.approvals import ApproveAll
from zuno.policy.hooks import HookCall, HookDecision
from zuno.policy.permissions import rule_matches
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


def runtime_with_hooks(
    workspace: Path, tmp_path: Path, rec: Recorder, hooks: dict[str, Any], **kw: Any
) -> Runtime:
    return Runtime(
        workspace,
        config=Config.model_validate({"hooks": hooks}),
        db_path=tmp_path / "z.db",
        approver=ApproveAll(),
        tools=probe_tools(rec),
        **kw,
    )


def hook(script: str, **kw: Any) -> dict[str, Any]:
    return {"command": f"{sys.executable} -c '{script}'", **kw}


async def test_command_hook_receives_the_call_and_can_deny(workspace: Path, tmp_path: Path) -> None:
    rec = Recorder()
    script = (
        "import json,sys; c=json.load(sys.stdin); "
        'print(json.dumps({"decision": "deny" if c["arguments"]["tag"]=="bad" else "allow", '
        '"reason": "no bad tags"}))'
    )
    rt = runtime_with_hooks(workspace, tmp_path, rec, {"before": [hook(script)]})
    s = rt.open_session()
    ok, bad = await rt.dispatch(s, [CallRequest("probe", {"tag": t}) for t in ("good", "bad")])
    assert ok.outcome is Outcome.OK
    assert bad.outcome is Outcome.BLOCKED and bad.block_kind is BlockKind.DENIED
    assert "no bad tags" in bad.output
    assert "bad" not in rec.intervals()


@pytest.mark.parametrize(
    ("script", "why"),
    [
        ("import sys; sys.exit(3)", "exited with status 3"),
        ("print(123)", "must print a JSON object"),
        ('print("nonsense")', "not JSON"),
        ("import time; time.sleep(30)", "timed out"),
    ],
)
async def test_a_broken_hook_denies(workspace: Path, tmp_path: Path, script: str, why: str) -> None:
    rec = Recorder()
    rt = runtime_with_hooks(workspace, tmp_path, rec, {"before": [hook(script, timeout=1)]})
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "t"})
    assert result.block_kind is BlockKind.DENIED and why in result.output
    assert rec.events == []


async def test_hook_limited_to_some_tools(workspace: Path, tmp_path: Path) -> None:
    rec = Recorder()
    rt = runtime_with_hooks(
        workspace, tmp_path, rec, {"before": [hook("import sys; sys.exit(1)", tools=["other"])]}
    )
    s = rt.open_session()
    assert (await rt.call(s, "probe", {"tag": "t"})).outcome is Outcome.OK


async def test_python_hooks_before_and_after(workspace: Path, tmp_path: Path) -> None:
    rec = Recorder()
    seen: list[tuple[str, str | None]] = []

    def before(call: HookCall) -> HookDecision | None:
        seen.append((call.phase, None))
        if call.arguments["tag"] == "nope":
            return HookDecision(False, "nope is refused")
        return None

    async def after(call: HookCall) -> bool:
        seen.append((call.phase, call.outcome))
        return call.arguments["tag"] != "hide"

    rt = runtime_with_hooks(
        workspace, tmp_path, rec, {}, before_hooks=[before], after_hooks=[after]
    )
    s = rt.open_session()
    nope = await rt.call(s, "probe", {"tag": "nope"})
    hidden = await rt.call(s, "probe", {"tag": "hide"})
    assert nope.block_kind is BlockKind.DENIED and "nope is refused" in nope.output
    # The after hook cannot undo the call: it ran (outcome ok) but its result is withheld.
    assert hidden.outcome is Outcome.OK and "withheld" in hidden.output
    assert "done hide" not in hidden.output
    assert ("after", "ok") in seen


def rule(tool: str, pattern: str, action: str = "allow") -> PermissionRule:
    return PermissionRule(tool=tool, pattern=pattern, action=action)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("src/**", "src/a/b.py", True),
        ("src/**", "tests/a.py", False),
        ("*.py", "a.py", True),
        ("*.py", "src/a.py", False),
        ("**/*.py", "src/a.py", True),
        ("**/*.py", "a.py", True),
        ("docs/?.md", "docs/a.md", True),
    ],
)
def test_path_patterns(pattern: str, subject: str, expected: bool) -> None:
    assert rule_matches(rule("write", pattern), "write", subject, "path") is expected


@pytest.mark.parametrize(
    ("pattern", "command", "action", "expected"),
    [
        ("git status", "git status", "allow", True),
        ("git status", "git status --short", "allow", True),
        ("git status", "git statusx", "allow", False),
        ("git status", "git status; rm -rf ~", "allow", False),
        ("git status", "git status && curl x | sh", "allow", False),
        ("rm", "ls && rm -rf /", "deny", True),
        ("rm", "echo $(rm -rf /)", "deny", True),
        ("npm run *", "npm run build", "allow", True),
    ],
)
def test_command_prefixes(pattern: str, command: str, action: str, expected: bool) -> None:
    assert rule_matches(rule("shell", pattern, action), "shell", command, "prefix") is expected


def test_tool_name_globs_and_wildcard_pattern() -> None:
    assert rule_matches(rule("mcp__*", "*"), "mcp__files__delete", None, "glob")
    assert not rule_matches(rule("mcp__*", "x"), "mcp__files__delete", None, "glob")
