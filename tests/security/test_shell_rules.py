"""Shell permission rules follow what bash would run, not the text of the command.

An allow rule for ``git status`` must cover ``git status`` and nothing that
runs anything else; a deny rule for ``rm`` must catch ``rm`` however it is
spelled or wrapped. Every attack in the tables is first shown to be real: run
by bash in a scratch git repository it creates its marker (or deletes its
victim). Then the permission evaluation must refuse it, and through the real
``zuno`` command (no ``--yes``, no terminal, the rules in the user's config)
under bubblewrap and Landlock nothing it would do happens.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from shlex import join
from shlex import quote as shlex_quote
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zuno.config.permission import PermissionRule, PermissionSettings
from zuno.policy.permissions import evaluate
from zuno.policy.shell_analysis import analyse
from zuno.tools.shell import ShellTool

ZUNO = str(Path(sys.executable).with_name("zuno"))
ALLOW = {"tool": "shell", "pattern": "git status", "action": "allow"}
DENY = {"tool": "shell", "pattern": "rm", "action": "deny"}

# Each creates the file `pwned` in the current folder when bash runs it.
ALLOW_ATTACKS = [
    "git status; touch pwned",
    "git status;touch pwned",
    "git status && touch pwned",
    "git status --nope || touch pwned",
    "git status | touch pwned",
    "git status & touch pwned",
    "git status\ntouch pwned",
    "git status\n\ntouch pwned",
    "git status # comment\ntouch pwned",
    "git status\t&&\ttouch pwned",
    "git status $(touch pwned)",
    "git status `touch pwned`",
    'git status "$(touch pwned)"',
    "git status -- $(touch pwned)",
    "git status --short=$(touch pwned)",
    "git status $(: ; touch pwned)",
    "git status ${x:=\\$(touch pwned)}${x@P}",
    # No `$(`, backquote, separator or redirection in the text: the escaped
    # payload becomes code only when a transformation or arithmetic reads it.
    "git status ${x:=\\$\\(touch pwned\\)}${x@P}",
    "git status ${x:=a\\[\\$\\(touch\\ pwned\\)\\]}$[x]",
    "git status ${x:=a\\[\\$\\(touch\\ pwned\\)\\]}$((x))",
    "git status ${x:=a\\[\\$\\(touch\\ pwned\\)\\]}${y[x]}",
    "git status ${x:=a\\[\\$\\(touch\\ pwned\\)\\]}${PWD:x}",
    "git status ${x:=\\$(touch pwned)} ${x@P}",
    "git status $[a[$(touch pwned)]]",
    'git status "$[$(touch pwned)]"',
    "git status $((a[$(touch pwned)]))",
    "git status ${x[$(touch pwned)]}",
    "git status ${x:-$(touch pwned)}",
    'git status "${x:-$(touch pwned)}"',
    "git status ${x:=$(touch pwned)}",
    "git status ${PWD/$(touch pwned)/}",
    "git status ${PWD:0:$(touch pwned)}",
    "git status ~$(touch pwned)",
    "git status {$(touch pwned),}",
    "git status $\\\n(touch pwned)",
    "git status <<< $(touch pwned)",
    "git status <<EOF\n$(touch pwned)\nEOF",
    "git status > pwned",
    "git status >> pwned",
    "git status 2> pwned",
    "git status &> pwned",
    "git status >| pwned",
    "git status 1>pwned 2>&1",
    "git status | tee pwned",
    "x=$(touch pwned) git status",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='touch pwned' "
    "git status",
    "{ git status; touch pwned; }",
    "(git status; touch pwned)",
    "if git status; then touch pwned; fi",
    "git status && bash -c 'touch pwned'",
    "git status; $'touch' pwned",
    "eval 'git status; touch pwned'",
]
# Process substitutions run concurrently with the command: they do run, but
# bash does not wait for them, so the bash check below does not time them.
ASYNC_ALLOW_ATTACKS = ["git status <(touch pwned)", "git status >(touch pwned)"]

# Each deletes the file `victim` in the current folder when bash runs it.
DENY_ATTACKS = [
    "rm victim",
    "\\rm victim",
    "'r'm victim",
    '"rm" victim',
    'r""m victim',
    "r\\m victim",
    "rm\tvictim",
    "   rm    victim",
    "rm\\\n victim",
    "r\\\nm victim",
    "/bin/rm victim",
    "/usr/bin/rm victim",
    '"/bin/rm" victim',
    "/usr/bin/../bin/rm victim",
    "command rm victim",
    "command -p rm victim",
    "builtin command rm victim",
    "env rm victim",
    "env -- rm victim",
    "env -i PATH=/usr/bin:/bin rm victim",
    "exec rm victim",
    "exec -a foo rm victim",
    "nohup rm victim",
    "time rm victim",
    "nice rm victim",
    "nice -n 5 rm victim",
    "timeout 5 rm victim",
    "timeout -s KILL 5 rm victim",
    "stdbuf -o0 rm victim",
    "setsid -w rm victim",
    "ionice -c 3 rm victim",
    "timeout 5 nice -n 1 env A=1 rm victim",
    "echo victim | xargs rm",
    "xargs -I{} rm {} <<< victim",
    "find . -name victim -exec rm {} \\;",
    "find . -name victim -execdir rm {} +",
    "bash -c 'rm victim'",
    'sh -c "rm victim"',
    "sh -xc 'rm victim'",
    "/bin/sh -c 'rm victim'",
    "bash -c \"bash -c 'rm victim'\"",
    "nohup bash -c 'rm victim'",
    "echo $(rm victim)",
    "echo `rm victim`",
    "echo ${x:-$(rm victim)}",
    "(rm victim)",
    "{ rm victim; }",
    "true && rm victim",
    "true; rm victim",
    "ls | rm victim",
    "f() { rm victim; }; f",
    "if true; then rm victim; fi",
    "for f in victim; do rm $f; done",
    "while rm victim; do break; done",
    "case x in x) rm victim;; esac",
    "cat <(rm victim)",
    "cat <<EOF\n$(rm victim)\nEOF",
    "[[ $(rm victim) ]]",
    "export x=$(rm victim)",
    "echo rm victim | sh",
    "eval rm victim",
    "x=rm; $x victim",
    "rm${IFS}victim",
    "$'\\x72m' victim",
    "trap 'rm victim' EXIT",
    "source /dev/stdin <<< 'rm victim'",
    ". <(echo rm victim)",
    "x='$(rm victim)'; echo ${x@P}",
    "echo ${x:=\\$\\(rm\\ victim\\)}${x@P}",
    "echo ${x:=a\\[\\$\\(rm\\ victim\\)\\]}$[x]",
    "a='b[$(rm victim)]'; echo $((a))",
    "a='b[$(rm victim)]'; [[ $a -eq 1 ]]",
    "flock /tmp -c 'rm victim'",
    # Where tree-sitter-bash alone would read the text differently from bash.
    "ls\n\\rm victim",
    "echo \\\\\nrm victim",
    ": # \\\nrm victim",
    "echo `echo \\`rm victim\\``",
    "echo `\\\\rm victim`",
    "_= rm victim",
    "! ! rm victim",
]

LEGITIMATE = ["git status", "git status --short", "git  status", "git status 'a b'", "'git' status"]


def _settings(*rules: dict[str, str]) -> PermissionSettings:
    return PermissionSettings(mode="strict", rules=[PermissionRule(**r) for r in rules])


def _verdict(command: str, *rules: dict[str, str]) -> str:
    return evaluate(_settings(*rules), "shell", ShellTool.declaration, command, "prefix").action


def _bash(command: str, cwd: Path) -> None:
    subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    work = tmp_path / "repo"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    return work


def test_the_tables_are_large_enough() -> None:
    assert len(ALLOW_ATTACKS) + len(ASYNC_ALLOW_ATTACKS) >= 40
    assert len(DENY_ATTACKS) >= 40


@pytest.mark.parametrize("command", ALLOW_ATTACKS + ASYNC_ALLOW_ATTACKS)
def test_allow_rule_does_not_cover_an_attack(command: str) -> None:
    assert _verdict(command, ALLOW) != "allow"


@pytest.mark.parametrize("command", DENY_ATTACKS)
def test_deny_rule_catches_every_spelling_of_rm(command: str) -> None:
    assert _verdict(command, DENY) == "deny"
    assert _verdict(command, {**DENY, "action": "ask"}) == "ask"


@pytest.mark.parametrize("command", LEGITIMATE)
def test_plain_command_stays_allowed(command: str) -> None:
    assert _verdict(command, ALLOW, DENY) == "allow"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git statusx", "ask"),
        ("git stat", "ask"),
        ("git", "ask"),
        ("ls -la", "ask"),
        ("echo rm", "ask"),  # rm is an argument here, not a command
        ("grep -r rm .", "ask"),
        ("git status rm", "allow"),
    ],
)
def test_other_commands_fall_back_to_the_mode(command: str, expected: str) -> None:
    assert _verdict(command, ALLOW, DENY) == expected


def test_deny_with_arguments_and_prefix_patterns() -> None:
    deny_rf = {"tool": "shell", "pattern": "rm -rf", "action": "deny"}
    assert _verdict("sudo /bin/rm -rf /x", deny_rf) == "deny"
    assert _verdict("rm $FLAGS /x", deny_rf) == "deny"  # an expansion may be -rf
    assert _verdict("rm -f x", deny_rf) == "ask"
    assert _verdict("watch -n 1 rm x", DENY) == "deny"
    assert _verdict("watch -d 'ls; rm x'", DENY) == "deny"
    push = {"tool": "shell", "pattern": "git push", "action": "deny"}
    assert _verdict("git -c core.x=y --no-pager push origin", push) == "deny"
    assert _verdict("/usr/bin/git -C sub push", push) == "deny"
    assert _verdict("git status", push) == "ask"
    npm = {"tool": "shell", "pattern": "npm run *", "action": "allow"}
    assert _verdict("npm run build", npm) == "allow"
    assert _verdict("npm run build; touch x", npm) == "ask"


def test_execute_argv_is_matched_as_words() -> None:
    """``execute`` gives its argv shell-quoted: literal words, wrappers still seen."""
    execute_allow = {"tool": "execute", "pattern": "git status", "action": "allow"}
    execute_deny = {"tool": "execute", "pattern": "rm", "action": "deny"}

    def verdict(argv: list[str], *rules: dict[str, str]) -> str:
        found = evaluate(_settings(*rules), "execute", ShellTool.declaration, join(argv), "prefix")
        return found.action

    assert verdict(["git", "status", "$(touch x)"], execute_allow) == "allow"  # no shell runs it
    assert verdict(["/bin/rm", "x"], execute_deny) == "deny"
    assert verdict(["env", "bash", "-c", "rm x"], execute_deny) == "deny"


@pytest.mark.parametrize("command", ALLOW_ATTACKS)
def test_allow_attacks_are_real(command: str, repo: Path) -> None:
    """Bash does run each attack: the table tests something."""
    _bash(command, repo)
    assert (repo / "pwned").exists()


@pytest.mark.parametrize("command", DENY_ATTACKS)
def test_deny_attacks_are_real(command: str, repo: Path) -> None:
    (repo / "victim").write_text("x")
    _bash(command, repo)
    assert not (repo / "victim").exists()


COMMON = [
    "ls -la",
    "cat file | grep x",
    "npm run build && npm test",
    "find . -name '*.py' | xargs wc -l",
    "for f in *.py; do echo $f; done",
    "export FOO=bar; ./run.sh",
    "awk '{print $1}' f",
    "if [ -d build ]; then rm -rf build; fi",
    "echo $((1+2)) ${VAR:-default} ${#arr[@]} ~/x",
    'while read -r line; do echo "$line"; done < f',
    "diff <(sort a) <(sort b)",
    '[[ -n "$X" && -f y ]]',
    "cargo test 2>&1 | tail -5",
    "timeout 60 pytest -x",
    "python3 - <<'EOF'\nprint(1)\nEOF",
    "cat <<EOF > f.txt\nhello $x\nEOF",
    "docker run \\\n  -it img \\\n  bash",
]


@pytest.mark.parametrize("command", COMMON)
def test_everyday_commands_are_seen_through(command: str) -> None:
    """Not opaque: a deny rule on a command they do not run leaves them alone."""
    assert analyse(command).opaque is None
    assert _verdict(command, {"tool": "shell", "pattern": "curl", "action": "deny"}) == "ask"


def test_opaque_commands_say_why() -> None:
    for command in ("eval rm x", "$X y", "echo rm | sh", "git status ${x@P}", "git st 'a"):
        assert analyse(command).opaque, command
    for command in ("git status", "rm -rf x", "bash -c 'ls'", "find . -exec rm {} +"):
        assert analyse(command).opaque is None, command


# ---------------------------------------------------------------- the real CLI


class Workspace:
    """A git repository with the rules in the user's config folder."""

    def __init__(self, tmp_path: Path, kind: str) -> None:
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.ws = tmp_path / "ws"
        self.ws.mkdir()
        subprocess.run(["git", "init", "-q", str(self.ws)], check=True)
        config = {
            "permission": {"mode": "strict", "rules": [ALLOW, DENY]},
            "sandbox": {"kind": kind},
        }
        (self.home / "zuno.json").write_text(json.dumps(config))
        self.env = {
            **os.environ,
            "ZUNO_CONFIG_HOME": str(self.home),
            "ZUNO_DB": str(tmp_path / "zuno.db"),
        }

    def zuno(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ZUNO, *args],
            cwd=self.ws,
            env=self.env,
            input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def call(self, command: str) -> dict[str, Any]:
        proc = self.zuno("call", "shell", json.dumps({"command": command}), "--json")
        return json.loads(proc.stdout)


@pytest.mark.parametrize("kind", ["bubblewrap", "landlock"])
def test_cli_runs_git_status_and_blocks_every_attack(kind: str, tmp_path: Path) -> None:
    w = Workspace(tmp_path, kind)
    ok = w.call("git status")
    assert ok["outcome"] == "ok", ok
    assert ok["data"]["sandbox"] == kind
    assert "No commits yet" in ok["result"]

    single = w.call("git status ${x:=\\$\\(touch pwned\\)}${x@P}")
    assert single["outcome"] == "blocked" and single["block_kind"] == "denied", single
    assert not (w.ws / "pwned").exists()

    attacks = [c.replace("pwned", f"pwned{i}") for i, c in enumerate(ALLOW_ATTACKS)]
    attacks += [c.replace("victim", f"victim{i}") for i, c in enumerate(DENY_ATTACKS)]
    for i in range(len(DENY_ATTACKS)):
        (w.ws / f"victim{i}").write_text("keep")
    steps = [{"tool": "shell", "args": {"command": c}} for c in attacks]
    proc = w.zuno("batch", "-", "--json", stdin=json.dumps(steps))
    assert proc.returncode == 1, proc.stderr
    outcomes = Counter(json.loads(line)["outcome"] for line in _results(proc.stdout))
    assert outcomes == {"blocked": len(attacks)}, outcomes
    assert sorted(p.name for p in w.ws.glob("pwned*")) == []
    assert len(list(w.ws.glob("victim*"))) == len(DENY_ATTACKS)


def _results(stdout: str) -> list[str]:
    data = json.loads(stdout)
    calls = data["results"] if isinstance(data, dict) else data
    return [json.dumps(c) for c in calls]


# ---------------------------------------------------------------- generated commands

_PAYLOAD = "touch pwned"
_DANGEROUS_WORDS = [
    "${x:=\\$\\(touch\\ pwned\\)}${x@P}",
    "${x:=a\\[\\$\\(touch\\ pwned\\)\\]}$[x]",
    "${x:=a\\[\\$\\(touch\\ pwned\\)\\]}$((x))",
    "${x:=a\\[\\$\\(touch\\ pwned\\)\\]}${y[x]}",
    "${x:=a\\[\\$\\(touch\\ pwned\\)\\]}${PWD:x}",
    f"$({_PAYLOAD})",
    f"`{_PAYLOAD}`",
    f'"$({_PAYLOAD})"',
    f"$[a[$({_PAYLOAD})]]",
    f"$((a[$({_PAYLOAD})]))",
    f"${{x:=\\$({_PAYLOAD})}}${{x@P}}",
    f"${{x[$({_PAYLOAD})]}}",
    f"${{x:-$({_PAYLOAD})}}",
    f"${{PWD:0:$({_PAYLOAD})}}",
    f"$\\\n({_PAYLOAD})",
    f"{{$({_PAYLOAD}),}}",
    "> pwned",
    ">pwned",
    "2>pwned",
    ">> pwned",
    f"<<< $({_PAYLOAD})",
]
_HARMLESS_WORDS = ["--short", "-s", "'a b'", '"c d"', "x\\ y", ".", "--", "-uno", "'$(x)'", '"#"']
_SEPARATORS = [";", " ; ", "&&", " && ", "||", "|", " | ", "&", "\n", "\n\n", " # c\n", "\t;\t"]
_PREFIXES = [
    "A=1 ",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='touch pwned' ",
]
# The plain spellings are repeated so that they come up most often.
_GIT = ["git", "git", "git", "'git'", '"git"', "g'i't", "\\git"]
_STATUS = ["status", "status", "status", "'status'", 'st"a"tus', "\\status"]
_BLANKS = [" ", " ", " ", "  ", "\t", " \t "]


@st.composite
def _commands(draw: st.DrawFn) -> tuple[str, bool]:
    """A command built around ``git status`` and whether it is exactly the plain command."""
    plain = True
    text = ""
    if draw(st.integers(0, 5)) == 0:
        text += draw(st.sampled_from(_PREFIXES))
        plain = False
    text += draw(st.sampled_from(_GIT)) + draw(st.sampled_from(_BLANKS))
    text += draw(st.sampled_from(_STATUS))
    for _ in range(draw(st.integers(0, 3))):
        text += draw(st.sampled_from(_BLANKS))
        if draw(st.booleans()):
            text += draw(st.sampled_from(_DANGEROUS_WORDS))
            plain = False
        else:
            text += draw(st.sampled_from(_HARMLESS_WORDS))
    if draw(st.integers(0, 2)) == 0:
        text += draw(st.sampled_from(_SEPARATORS)) + _PAYLOAD
        plain = False
    return text, plain


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_commands())
def test_generated_commands_are_allowed_only_when_plain(case: tuple[str, bool]) -> None:
    command, plain = case
    if _verdict(command, ALLOW, DENY) == "allow":
        assert plain, command


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_commands())
def test_generated_plain_commands_stay_allowed(case: tuple[str, bool]) -> None:
    """Quoting and blanks that bash removes do not cost the user an approval."""
    command, plain = case
    if plain:
        assert _verdict(command, ALLOW, DENY) == "allow", command


def test_generated_commands_allowed_by_the_analysis_run_nothing_else(tmp_path: Path) -> None:
    """200 generated commands through real bash: whatever is allowed runs no payload."""
    stats: Counter[str] = Counter()
    runs = iter(range(10_000))

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_commands())
    def check(case: tuple[str, bool]) -> None:
        command, _ = case
        work = tmp_path / f"run{next(runs)}"
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        verdict = "allowed" if _verdict(command, ALLOW, DENY) == "allow" else "refused"
        _bash(command, work)
        ran = (work / "pwned").exists()
        stats[verdict] += 1
        stats[f"{verdict}, payload ran"] += ran
        shutil.rmtree(work)
        assert not (verdict == "allowed" and ran), command

    check()
    print(f"\ngenerated commands run through bash: {dict(stats)}")
    assert stats["allowed"] and stats["refused, payload ran"]  # both sides were exercised


_RM_NAMES = ["rm", "rm", "\\rm", "'r'm", '"rm"', 'r""m', "r\\m", "/bin/rm", "/usr/bin/rm", "r\\\nm"]
_RM_WRAPPERS = [
    "command",
    "builtin command",
    "env",
    "env -i PATH=/usr/bin:/bin",
    "nohup",
    "time",
    "nice",
    "nice -n 3",
    "timeout 5",
    "timeout -s KILL 5",
    "stdbuf -o0",
    "setsid -w",
    "ionice -c 3",
    "prlimit --nofile=64",
    "setpriv",
    "setarch x86_64",
    "jobs -x",
    "fakeroot --",
]
_RM_ARGS = ["victim", "-f victim", "-- victim", "'victim'", '"victim"']
_RM_CONTEXTS = [
    "{}",
    "$({})",
    "`{}`",
    "({})",
    "{{ {}; }}",
    'echo "$({})"',
    "x=$({})",
    "true && {}",
    "false || {}",
    "true; {}",
    "echo | {}",
    "f() {{ {}; }}; f",
    "if true; then {}; fi",
    "cat <<EOF\n$({})\nEOF",
]
_RM_SHELLS = ["bash -c {}", "sh -c {}", "bash -xc {}", "nohup bash -c {}"]


@st.composite
def _rm_commands(draw: st.DrawFn) -> str:
    """A command that deletes `victim` through some spelling, wrapper and context of rm."""
    words = [draw(st.sampled_from(_RM_WRAPPERS)) for _ in range(draw(st.integers(0, 2)))]
    text = " ".join([*words, draw(st.sampled_from(_RM_NAMES)), draw(st.sampled_from(_RM_ARGS))])
    for _ in range(draw(st.integers(0, 2))):
        if draw(st.booleans()):
            text = draw(st.sampled_from(_RM_SHELLS)).format(shlex_quote(text))
        else:
            text = draw(st.sampled_from(_RM_CONTEXTS)).format(text)
    return text


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rm_commands())
def test_generated_spellings_of_rm_are_denied(command: str) -> None:
    assert _verdict(command, ALLOW, DENY) == "deny", command


def test_generated_spellings_of_rm_that_delete_are_denied(tmp_path: Path) -> None:
    """200 generated commands through real bash: each that deletes the victim is denied."""
    stats: Counter[str] = Counter()
    runs = iter(range(10_000))

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_rm_commands())
    def check(command: str) -> None:
        work = tmp_path / f"run{next(runs)}"
        work.mkdir()
        (work / "victim").write_text("x")
        denied = _verdict(command, ALLOW, DENY) == "deny"
        _bash(command, work)
        deleted = not (work / "victim").exists()
        stats[f"{'deleted' if deleted else 'kept'}, {'denied' if denied else 'NOT denied'}"] += 1
        shutil.rmtree(work)
        assert denied or not deleted, command

    check()
    print(f"\ngenerated spellings of rm run through bash: {dict(stats)}")
    assert stats["deleted, denied"]


# Word pieces, separators and constructs for commands that bash itself judges:
# run with an empty PATH, every external command it would start goes to
# command_not_found_handle, which logs the name. Each logged name must be
# among the commands the analysis found, unless the analysis gave up (opaque).
_PIECES = ["r", "m", "x", "'r'", '"m"', "\\r", "\\m", "]", "]]", "}", "{", "!", "#", "@", "="]
_PIECES += ["%", ",", ":", "~", "-", "\\ ", "\\;", "$x", "${x}", "$'r'", "*", "?", "[", "1", "_"]
_PIECES += ["\\\n", "'", '"', "\\\\", "$", "`", "."]
_JOINS = [" ; ", ";", " && ", " || ", " | ", "\n", " & ", "\n\n"]
_AROUND = ["{}", "$({})", "`{}`", "({})", "{{ {}; }}", "{{ {};}}", "if true; then {}; fi"]
_AROUND += ["f() {{ {}; }}; f", "! {}", 'echo "$({})"', "x=$({}) ", "case a in a) {};; esac"]
_AROUND += ["for i in 1; do {}; done"]
_LOG_NAMES = '() { printf "%s\\0" "${1##*/}" >> "$LOG"; return 0; }'


@st.composite
def _shell_soup(draw: st.DrawFn, depth: int = 0) -> str:
    def simple() -> str:
        words = [
            "".join(draw(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=4)))
            for _ in range(draw(st.integers(1, 3)))
        ]
        if draw(st.integers(0, 2)) == 0:
            words[0] = draw(st.sampled_from(["rm", "r'm'", "\\rm", "ls"]))
        return draw(st.sampled_from([" ", "  ", "\t"])).join(words)

    text = simple()
    for _ in range(draw(st.integers(0, 2))):
        text += draw(st.sampled_from(_JOINS)) + simple()
    if depth < 2 and draw(st.booleans()):
        inner = draw(_shell_soup(depth + 1)) if draw(st.booleans()) else text
        text = draw(st.sampled_from(_AROUND)).format(inner)
    return text


def test_analysis_sees_every_command_bash_starts(tmp_path: Path) -> None:
    """Differential check against bash: 300 generated commands, names bash starts are seen."""
    stats: Counter[str] = Counter()
    env = {**os.environ, "PATH": "/nonexistent", "BASH_FUNC_command_not_found_handle%%": _LOG_NAMES}
    runs = iter(range(10_000))

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_shell_soup())
    def check(command: str) -> None:
        if "/" in command:
            return  # a path would start a real program, not the logging handler
        work = tmp_path / f"run{next(runs)}"
        work.mkdir()
        log = work / "names"
        subprocess.run(
            ["/bin/bash", "-c", command],
            cwd=work,
            env={**env, "LOG": str(log)},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
        started = set(log.read_text().split("\0")) - {""} if log.exists() else set()
        shutil.rmtree(work)
        found = analyse(command)
        stats["opaque" if found.opaque else "analysed"] += 1
        if found.opaque:
            return
        stats["analysed, bash started commands"] += bool(started)
        # Inside single quotes bash keeps a backslash-newline the analysis drops:
        # the names differ only in that literal text, never in what they name.
        started = {name.replace("\\\n", "") for name in started}
        assert started <= {c.name for c in found.commands}, command

    check()
    print(f"\ngenerated commands judged by bash: {dict(stats)}")
    assert stats["analysed, bash started commands"]


_LOG_ARGV = '() { printf "%s\\0" "$@" >> "$LOG"; printf "\\1\\0" >> "$LOG"; return 0; }'
_WORD_PIECES = [*_PIECES, "'a b'", '"a b"', '\\"', "\\'", "''", '""', "a=b", "é", "\\t", "-"]
_GAPS = [" ", "\t", "  ", "\n", ";", "&", "|", "<", ">", "(", ")", "\r", "\u00a0"]


@st.composite
def _word_soup(draw: st.DrawFn) -> str:
    pieces = st.sampled_from(_WORD_PIECES + _GAPS)
    return "x" + "".join(draw(st.lists(pieces, min_size=1, max_size=8)))


def test_plain_commands_run_exactly_their_words(tmp_path: Path) -> None:
    """Differential check against bash: a command the analysis calls plain starts one
    program with exactly the analysed words, and nothing else happens."""
    stats: Counter[str] = Counter()
    env = {**os.environ, "PATH": "/nonexistent", "BASH_FUNC_command_not_found_handle%%": _LOG_ARGV}
    runs = iter(range(100_000))

    @settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_word_soup())
    def check(command: str) -> None:
        plain = analyse(command).plain
        stats["plain" if plain else "not plain"] += 1
        if plain is None or "/" in command:
            return
        work = tmp_path / f"run{next(runs)}"
        work.mkdir()
        log = work / "argv"
        subprocess.run(
            ["/bin/bash", "-c", command],
            cwd=work,
            env={**env, "LOG": str(log)},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
        raw = log.read_bytes() if log.exists() else b""
        started = [
            tuple(w.decode("utf-8", "surrogateescape") for w in call.split(b"\0")[:-1])
            for call in raw.split(b"\x01\x00")
            if call
        ]
        left = sorted(p.name for p in work.iterdir())
        shutil.rmtree(work)
        assert started == [plain], command
        assert left == ["argv"], command
        stats["plain, run by bash as analysed"] += 1

    check()
    print(f"\nplain commands checked against bash: {dict(stats)}")
    assert stats["plain, run by bash as analysed"]
