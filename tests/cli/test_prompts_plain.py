"""Approvals and results in plain words, read from a real terminal (tmux) as a person reads them.

An approval names the call as a person would say it (``write notes.md (new file, 2 lines)``,
``$ ls -la``), shows what a new file will hold, and asks in words; a result keeps what
matters (the files a patch touched, the user's answer); arguments left at their defaults,
nested ones included, are not printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from tmux_pane import (
    MODEL,
    FakeModelServer,
    OpenPane,
    Pane,
    Reply,
    model_server,
    pane_factory,
    plain,
    tmux_needed,
)

from zuno.core.declarations import Concurrency, Declaration, Effect, Replay
from zuno.policy.approvals import ApprovalDecision, ApprovalRequest
from zuno.policy.terminal_approver import TerminalApprover

__all__ = ["model_server", "pane_factory"]  # fixtures, imported for pytest


_ASK = "allow? [y]es / [n]o / [a]lways / [t] no, tell the model why"


def _finished(pane: Pane, answer: str) -> str:
    pane.wait_text(answer)
    text = pane.wait_for(lambda t: plain(t).rstrip().endswith("shell$"), "the shell prompt back")
    return plain(text)


@tmux_needed
def test_new_file_write_approval_says_what_it_does_and_shows_the_content(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    content = "alpha line\nbeta line\n"
    model_server.enqueue(
        Reply(tool_calls=[("c1", "write", json.dumps({"path": "notes.md", "content": content}))]),
        Reply(text="Wrote it."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "take notes", "--model", MODEL)
    prompt = plain(pane.wait_text(_ASK))
    assert f"write notes.md (new file, 2 lines): {_ASK}" in prompt
    asked = prompt.split("take notes")[-1]
    assert "alpha line" in asked and "beta line" in asked
    for jargon in ("side_effecting", "strict mode", "Zuno wants to run", '"content"'):
        assert jargon not in asked
    pane.type("n")
    _finished(pane, "Wrote it.")
    assert not (workspace / "notes.md").exists()


@tmux_needed
def test_shell_approval_shows_the_command_not_json(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    (workspace / "sub").mkdir()
    arguments = {"command": "ls -la", "workdir": "sub", "timeout": 30}
    model_server.enqueue(
        Reply(tool_calls=[("c1", "shell", json.dumps(arguments))]), Reply(text="Listed.")
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "list it", "--model", MODEL)
    prompt = plain(pane.wait_text(_ASK)).split("list it")[-1]
    assert "$ ls -la" in prompt and "in sub" in prompt and "timeout 30 s" in prompt
    assert '{"command"' not in prompt and "side_effecting" not in prompt
    pane.type("y")
    shown = _finished(pane, "Listed.")
    assert '{"command"' not in shown and "background" not in shown


@tmux_needed
def test_results_keep_the_patched_files_and_the_answer(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    patch = "*** Begin Patch\n*** Add File: one.txt\n+1\n*** Add File: two.txt\n+2\n*** End Patch"
    question = {
        "questions": [
            {
                "header": "Style",
                "question": "Tabs or spaces?",
                "options": [{"label": "tabs"}, {"label": "spaces"}],
            }
        ]
    }
    model_server.enqueue(
        Reply(tool_calls=[("c1", "apply_patch", json.dumps({"patch": patch}))]),
        Reply(tool_calls=[("c2", "question", json.dumps(question))]),
        Reply(text="Spaces it is."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "add two files", "--model", MODEL)
    pane.wait_text(_ASK)
    pane.type("y")
    pane.wait_text("Answer with")
    pane.type("2")
    shown = _finished(pane, "Spaces it is.")
    assert (workspace / "one.txt").read_text() == "1\n"
    result = shown.split("Success. Updated the following files:")[-1]
    assert "A one.txt" in result and "A two.txt" in result
    answered = shown.split("The user answered:")[-1]
    assert "Style: spaces" in answered


@tmux_needed
def test_nested_default_fields_are_not_printed(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    question = {
        "questions": [{"header": "Name", "question": "What name?", "options": [{"label": "zed"}]}]
    }
    model_server.enqueue(
        Reply(tool_calls=[("c1", "question", json.dumps(question))]), Reply(text="Named.")
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "name it", "--model", MODEL)
    pane.wait_text("Answer with")
    pane.type("1")
    shown = _finished(pane, "Named.")
    assert "What name?" in shown
    for default in ("allow_other", "multiple", '"description"'):
        assert default not in shown


# -- the approver through the Python API: the words of the prompt ------------------------------

_SIDE = Declaration(Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.EXCLUSIVE)
_STRICT = "strict mode: side_effecting calls need approval"


def _request(tool: str, arguments: dict[str, Any], preview: str, reason: str = _STRICT) -> Any:
    return ApprovalRequest(
        "ses_x", "call_x", tool, arguments, _SIDE, preview, reason, "fp", "this exact call"
    )


def _asked(request: ApprovalRequest, *answers: str) -> tuple[Any, list[str]]:
    prompts: list[str] = []
    replies = iter(answers)

    def ask(text: str) -> str:
        prompts.append(text)
        return next(replies)

    decision = anyio.run(TerminalApprover(ask).decide, request)
    return decision, prompts


def test_shell_prompt_is_the_command_with_its_settings() -> None:
    arguments = {"command": "ls -la", "timeout": 30, "workdir": "sub", "background": False}
    request = _request("shell", arguments, json.dumps(arguments))
    decision, (prompt,) = _asked(request, "a")
    assert decision is ApprovalDecision.APPROVE_SESSION
    assert prompt.rstrip().endswith(f"$ ls -la (in sub, timeout 30 s): {_ASK}")
    assert "{" not in prompt and "side_effecting" not in prompt and "strict" not in prompt


def test_new_file_prompt_shows_its_first_lines() -> None:
    content = "".join(f"line {n}\n" for n in range(1, 31))
    request = _request(
        "write", {"path": "notes.md", "content": content}, "write notes.md: new file, 30 lines"
    )
    decision, (prompt,) = _asked(request, "")
    assert decision is ApprovalDecision.DENY
    assert "+line 1\n" in prompt and "+line 10\n" in prompt and "line 11\n" not in prompt
    assert "20 more lines" in prompt
    assert f"write notes.md (new file, 30 lines): {_ASK}" in prompt


def test_edit_prompt_shows_what_it_replaces_and_a_rule_says_why() -> None:
    request = _request(
        "edit",
        {"path": "a.py", "old_string": "x = 1\n", "new_string": "x = 2\n", "replace_all": False},
        "{}",
        reason="rule 'ask edit' matching 'a.py'",
    )
    decision, (prompt, again) = _asked(request, "maybe", "y")
    assert decision is ApprovalDecision.APPROVE_ONCE
    assert "Please press y" in again
    assert "-x = 1" in prompt and "+x = 2" in prompt and "replace_all" not in prompt
    assert "rule 'ask edit' matching 'a.py'" in prompt
    assert prompt.rstrip().endswith(f"edit a.py: {_ASK}")


def test_every_answer_is_offered_on_the_question_line() -> None:
    request = ApprovalRequest(
        "ses_x",
        "call_x",
        "edit",
        {"path": "a.py", "old_string": "x", "new_string": "y"},
        _SIDE,
        "{}",
        _STRICT,
        "fp",
        "this exact call",
        offers_accept_edits=True,
    )
    decision, (prompt,) = _asked(request, "e")
    assert decision is ApprovalDecision.ACCEPT_EDITS
    question = prompt.rstrip().splitlines()[-1]
    for offer in ("[y]es", "[n]o", "[a]lways", "[t] no, tell the model why", "[e] yes"):
        assert offer in question, question


def test_t_denies_with_the_words_typed_for_the_model() -> None:
    from zuno.policy.approvals import ApprovalAnswer

    request = _request("shell", {"command": "pip install x"}, "{}")
    decision, (_prompt, reason_prompt) = _asked(request, "t", "use uv instead")
    assert decision == ApprovalAnswer(ApprovalDecision.DENY, message="use uv instead")
    assert "tell the model why" in reason_prompt
