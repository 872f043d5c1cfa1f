"""Shell rules fail closed by construction (issue 25, items 2 and 3), through the real CLI.

Allow rules on ``printf``, ``jobs`` and ``builtin *`` must not admit a builtin that
evaluates a name or runs its arguments; a deny rule on ``rm`` must hold through every
wrapper, the dynamic loader and shells started with no command, for ``shell`` and
``exec_command`` alike. Each attack is first shown to be real in plain bash; then
``zuno batch`` (no terminal, and with ``--yes`` where the rule denies) runs them under
bubblewrap and Landlock, and what counts is the workspace: no marker, no victim gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from zuno.config.permission import PermissionRule, PermissionSettings
from zuno.policy.permissions import evaluate
from zuno.policy.shell_inert import BUILTINS
from zuno.tools.shell import ShellTool

ZUNO = str(Path(sys.executable).with_name("zuno"))

ALLOW_RULES = [
    {"tool": "shell", "pattern": "printf", "action": "allow"},
    {"tool": "shell", "pattern": "jobs", "action": "allow"},
    {"tool": "shell", "pattern": "builtin *", "action": "allow"},
    {"tool": "shell", "pattern": "command *", "action": "allow"},
    {"tool": "shell", "pattern": "git *", "action": "allow"},
    {"tool": "shell", "pattern": "wait", "action": "allow"},
    {"tool": "shell", "pattern": "test", "action": "allow"},
]
# Each creates the file MARK in the current folder when bash runs it.
ALLOW_ATTACKS = [
    "printf -v'a[$(touch MARK)]' x",
    "printf -v 'a[$(touch MARK)]' x",
    "printf -va[\\$\\(touch\\ MARK\\)] x",
    "jobs -x touch MARK",
    "builtin declare 'a[$(touch MARK)]=1'",
    "builtin printf -v 'a[$(touch MARK)]' x",
    "builtin read 'a[$(touch MARK)]' <<< x",
    "builtin eval 'touch MARK'",
    "builtin source /dev/stdin <<< 'touch MARK'",
    "builtin let 'a[$(touch MARK)]'",
    "builtin mapfile -C 'touch MARK' -c 1 <<< x",
    "builtin trap 'touch MARK' EXIT",
    "builtin exec touch MARK",
    "builtin command touch MARK",
    "command touch MARK",
    "command eval 'touch MARK'",
    "git -c alias.x='!touch MARK' x",
    "test -v 'a[$(touch MARK)]'",
]
DENY = {"tool": "shell", "pattern": "rm", "action": "deny"}
# Each deletes the file VICTIM in the current folder when bash runs it.
DENY_ATTACKS = [
    "env -vS'rm VICTIM'",
    "env -iS'rm VICTIM'",
    "env --split-str='rm VICTIM'",
    "env - rm VICTIM",
    "env -i - PATH=/usr/bin:/bin rm VICTIM",
    "script -qc 'rm VICTIM' /dev/null",
    "script -ec 'rm VICTIM' /dev/null",
    "script -q -c 'rm VICTIM' /dev/null",
    "echo 'rm VICTIM' | unshare",
    "echo 'rm VICTIM' | unshare -U",
    "echo 'rm VICTIM' | script -q /dev/null",
    "echo 'rm VICTIM' | fakeroot",
    "echo 'rm VICTIM' | setarch x86_64",
    "jobs -x rm VICTIM",
    "builtin declare 'a[$(rm VICTIM)]=1'",
    "command typeset 'a[$(rm VICTIM)]=1'",
    "printf -v'a[$(rm VICTIM)]' x",
    "prlimit rm VICTIM",
    "prlimit --nofile=100 rm VICTIM",
    "setpriv rm VICTIM",
    "setpriv --reuid 0 rm VICTIM",
    "setarch x86_64 rm VICTIM",
    "setarch x86_64 -R rm VICTIM",
    "linux64 rm VICTIM",
    "/lib64/ld-linux-x86-64.so.2 /bin/rm VICTIM",
    "fakeroot rm VICTIM",
    "fakeroot -- rm VICTIM",
    "valgrind -q rm VICTIM",
    "valgrind --log-file=/dev/null rm VICTIM",
    "python3 -c 'import os; os.remove(\"VICTIM\")'",
    "perl -e 'unlink \"VICTIM\"'",
]
# Unknown programs (they may run rm by their own logic) are asked about, not denied:
# refused without a person, run with --yes.
ASKED = {"python3 -c 'import os; os.remove(\"VICTIM\")'", "perl -e 'unlink \"VICTIM\"'"}
# Interactive shells through a wrapper, started on a terminal by exec_command.
SHELLS = ["script -q /dev/null", "unshare", "unshare -r", "fakeroot", "setarch x86_64", "bash"]


def _bash(command: str, cwd: Path) -> None:
    # An interactive shell started by `script` can outlive its stdin: timeout ends the
    # whole process group once the payload has long run.
    subprocess.run(
        ["timeout", "-s", "KILL", "15", "bash", "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("command", ALLOW_ATTACKS)
def test_allow_attacks_are_real(command: str, tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _bash(command, tmp_path)
    assert (tmp_path / "MARK").exists()


@pytest.mark.parametrize("command", DENY_ATTACKS)
def test_deny_attacks_are_real(command: str, tmp_path: Path) -> None:
    (tmp_path / "VICTIM").write_text("keep")
    _bash(command, tmp_path)
    assert not (tmp_path / "VICTIM").exists()


class Zuno:
    """``zuno batch`` in a git workspace with the rules in the user's config folder."""

    def __init__(self, tmp_path: Path, kind: str, rules: list[dict[str, str]]) -> None:
        home = tmp_path / "home"
        home.mkdir()
        self.ws = tmp_path / "ws"
        self.ws.mkdir()
        subprocess.run(["git", "init", "-q", str(self.ws)], check=True)
        config = {
            "permission": {"mode": "strict", "rules": rules},
            "sandbox": {"kind": kind},
            "tools": {"exec_command": True, "write_stdin": True},
        }
        (home / "zuno.json").write_text(json.dumps(config))
        self.env = {
            **os.environ,
            "ZUNO_CONFIG_HOME": str(home),
            "ZUNO_DB": str(tmp_path / "zuno.db"),
        }

    def batch(self, steps: list[dict[str, Any]], *flags: str) -> list[dict[str, Any]]:
        proc = subprocess.run(
            [ZUNO, "batch", "-", "--json", "--new-session", *flags],
            cwd=self.ws,
            env=self.env,
            input=json.dumps(steps),
            capture_output=True,
            text=True,
            timeout=600,
        )
        data: Any = json.loads(proc.stdout)
        return cast("list[dict[str, Any]]", data["results"] if isinstance(data, dict) else data)


def _steps(commands: list[str]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for command in commands:
        steps.append({"tool": "shell", "args": {"command": command}})
        steps.append({"tool": "exec_command", "args": {"command": command, "yield_ms": 3000}})
    return steps


@pytest.mark.parametrize("kind", ["bubblewrap", "landlock"])
def test_allow_rules_admit_no_builtin_that_evaluates(kind: str, tmp_path: Path) -> None:
    zuno = Zuno(tmp_path, kind, ALLOW_RULES)
    attacks = [c.replace("MARK", f"MARK{i}") for i, c in enumerate(ALLOW_ATTACKS)]
    results = zuno.batch(_steps([*attacks, "printf '%s\\n' still-allowed"]))
    outcomes = [(r["outcome"], r.get("block_kind")) for r in results]
    assert outcomes[:-2] == [("blocked", "denied")] * (2 * len(attacks)), outcomes
    assert sorted(p.name for p in zuno.ws.glob("MARK*")) == []
    # The inert use of an allowed builtin still runs without a person.
    assert outcomes[-2] == ("ok", None) and "still-allowed" in results[-2]["result"]


@pytest.mark.parametrize("kind", ["bubblewrap", "landlock"])
def test_a_deny_rule_holds_through_every_wrapper(kind: str, tmp_path: Path) -> None:
    zuno = Zuno(tmp_path, kind, [DENY])
    attacks = [c.replace("VICTIM", f"VICTIM{i}") for i, c in enumerate(DENY_ATTACKS)]
    for i in range(len(attacks)):
        (zuno.ws / f"VICTIM{i}").write_text("keep")
    # No person: what the rule denies and what it asks about are both refused.
    results = zuno.batch(_steps(attacks))
    assert [r["outcome"] for r in results] == ["blocked"] * len(results), results
    assert len(list(zuno.ws.glob("VICTIM*"))) == len(attacks)
    # --yes approves what is asked, never what a rule denies: only the programs the
    # rule cannot see into run (and they do delete, which is why they are asked about).
    results = zuno.batch(_steps(attacks), "--yes")
    denied = [
        c for c, r in zip(DENY_ATTACKS, results[::2], strict=True) if r["outcome"] == "blocked"
    ]
    assert set(DENY_ATTACKS) - set(denied) == ASKED
    kept = {int(p.name.removeprefix("VICTIM")) for p in zuno.ws.glob("VICTIM*")}
    assert {DENY_ATTACKS[i] for i in set(range(len(attacks))) - kept} == ASKED


@pytest.mark.parametrize("kind", ["bubblewrap", "landlock"])
def test_shells_started_through_wrappers_are_refused_under_a_deny_rule(
    kind: str, tmp_path: Path
) -> None:
    zuno = Zuno(tmp_path, kind, [DENY])
    steps = [{"tool": "exec_command", "args": {"command": c, "yield_ms": 2000}} for c in SHELLS]
    results = zuno.batch(steps, "--yes")
    assert [(r["outcome"], r.get("block_kind")) for r in results] == [("blocked", "denied")] * len(
        SHELLS
    ), results


# ---------------------------------------------------------------- the tables and the verdicts


def test_every_builtin_of_this_bash_is_in_the_closed_table() -> None:
    names = subprocess.run(
        ["bash", "-c", "compgen -b"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(names) > 50
    assert set(names) <= set(BUILTINS), set(names) - set(BUILTINS)


def _verdict(command: str, *rules: dict[str, Any]) -> str:
    settings = PermissionSettings(
        mode="permissive", rules=[PermissionRule.model_validate(r) for r in rules]
    )
    return evaluate(settings, "shell", ShellTool.declaration, command, "prefix").action


@pytest.mark.parametrize(
    ("command", "rules", "expected"),
    [
        # Under a deny rule on commands, what is known inert runs; the rest asks.
        ("ls -la", [DENY], "allow"),
        ("git status --short", [DENY], "allow"),
        ("echo rm", [DENY], "allow"),
        ("python3 build.py", [DENY], "ask"),
        ("make", [DENY], "ask"),
        ("git -c core.pager=less log", [DENY], "ask"),
        ("git submodule foreach ls", [DENY], "ask"),
        ("export A=1", [DENY], "ask"),
        ("nice -n 5 ls", [DENY], "allow"),  # a wrapper seen through to an inert command
        ("nice -n 5 make", [DENY], "ask"),
        ("prlimit rm x", [DENY], "deny"),
        # An allow rule naming an unknown program trusts it, over the deny's question.
        (
            "python3 build.py",
            [DENY, {"tool": "shell", "pattern": "python3", "action": "allow"}],
            "allow",
        ),
        # A rule for every tool is a path rule: it does not make every command ask.
        ("python3 build.py", [{"tool": "*", "pattern": ".env", "action": "deny"}], "allow"),
        # No rule on commands: nothing changes.
        ("python3 build.py", [], "allow"),
    ],
)
def test_what_a_deny_rule_on_commands_asks_about(
    command: str, rules: list[dict[str, Any]], expected: str
) -> None:
    assert _verdict(command, *rules) == expected


def test_the_cli_offers_an_allow_rule_only_where_one_can_cover_the_command(
    tmp_path: Path,
) -> None:
    zuno = Zuno(tmp_path, "bubblewrap", [DENY])

    def hint(command: str) -> str:
        proc = subprocess.run(
            [ZUNO, "call", "shell", json.dumps({"command": command})],
            cwd=zuno.ws,
            env=zuno.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert proc.returncode == 1, proc.stderr
        return proc.stderr

    assert '"pattern": "python3 -c 1"' in hint("python3 -c 1")
    refused = hint("export A=1")
    assert "no allow rule can cover this command" in refused and "pattern" not in refused
