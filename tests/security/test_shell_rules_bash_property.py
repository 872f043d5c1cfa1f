"""Property: whatever an allow rule admits runs no payload, judged by real bash.

Commands are generated over the whole bash builtin list and the wrapper programs
shell rules know (``env``, ``nice``, ``prlimit``, ``setpriv``, ``fakeroot``,
``script``, ``xargs`` ...), with arguments drawn from options and payloads that
create a marker file when bash or the program evaluates or runs them. The rule is
``allow <name>``: the case most likely to admit too much. Every command, admitted or
not, is run by bash in a throwaway bubblewrap sandbox (its own namespaces, only the
scratch folder writable); an admitted command must leave no marker. Programs the
tables do not know (``python3``) are left out: an allow rule naming one trusts it.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from shlex import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zuno.config.permission import PermissionRule, PermissionSettings
from zuno.policy.permissions import evaluate
from zuno.policy.shell_inert import BUILTINS
from zuno.policy.shell_wrappers import SHELLS, STRING_RUNNERS, WRAPPERS
from zuno.tools.shell import ShellTool

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

NAMES = [
    *sorted({*BUILTINS, *WRAPPERS, *SHELLS, *STRING_RUNNERS, "xargs", "find", "watch"}),
    *["git", "/lib64/ld-linux-x86-64.so.2", "env", "printf", "jobs", "builtin", "command"],
]
_PAYLOADS = [
    "touch M",
    "a[$(touch M)]",
    "a[$(touch M)]=1",
    "-va[$(touch M)]",
    "$(touch M)",
    "x[`touch M`]",
    "--command=touch M",
    "-Stouch M",
    "-ctouch M",
    "alias.x=!touch M",
    "core.pager=touch M",
]
# Option and payload together, as the builtins and wrappers that run them expect.
_CHUNKS = [
    ["-v", "a[$(touch M)]"],
    ["-x", "touch", "M"],
    ["-c", "touch M"],
    ["-qc", "touch M"],
    ["-S", "touch M"],
    ["-C", "touch M", "-c", "1"],
    ["-exec", "touch", "M", ";"],
    ["-c", "alias.x=!touch M", "x"],
    ["-n", "r=a[$(touch M)]"],
    ["-i", "a=a[$(touch M)]"],
    ["-R", "a[$(touch M)]"],
    ["-p", "a[$(touch M)]"],
    *[["touch", "M"]] * 4,
    ["/usr/bin/touch", "M"],
]
_PLAIN = [
    *("touch", "M", "x", "1", "0", "%s", "/usr/bin/touch", "-", "--", "read", "declare"),
    *("eval", "printf", "-x", "-v", "-p", "-c", "-C", "-S", "-i", "-n", "-R", "-e", "-a"),
    *("-f", "-q", "-s", "-u", "-lx", "-qc", "-iS", "-exec", "{}", ";", "+", "/dev/null"),
    *("x86_64", "-I{}", "log", "status", "help"),
]


@st.composite
def _commands(draw: st.DrawFn) -> tuple[str, str]:
    name = draw(st.sampled_from(NAMES))
    words = [name]
    if draw(st.booleans()):
        words.extend(draw(st.sampled_from(_CHUNKS)))
    for _ in range(draw(st.integers(0, 2))):
        pick = draw(st.integers(0, 2))
        if pick == 0:
            words.append(draw(st.sampled_from(_PAYLOADS)))
        elif pick == 1:
            words.extend(draw(st.sampled_from(_CHUNKS)))
        else:
            words.append(draw(st.sampled_from(_PLAIN)))
    return name, " ".join(quote(w) for w in words)


def _verdict(name: str, command: str) -> str:
    rules = [PermissionRule(tool="shell", pattern=quote(name), action="allow")]
    settings_ = PermissionSettings(mode="strict", rules=rules)
    return evaluate(settings_, "shell", ShellTool.declaration, command, "prefix").action


def _run_sandboxed(command: str, work: Path) -> None:
    subprocess.run(
        [
            *["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"],
            *["--tmpfs", "/tmp", "--bind", str(work), str(work), "--chdir", str(work)],
            *["--unshare-all", "--die-with-parent", "--new-session", "bash", "-c", command],
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=30,
        check=False,
    )


def test_commands_an_allow_rule_admits_leave_no_marker(tmp_path: Path) -> None:
    stats: Counter[str] = Counter()
    runs = iter(range(100_000))

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_commands())
    def check(case: tuple[str, str]) -> None:
        name, command = case
        admitted = _verdict(name, command) == "allow"
        work = tmp_path / f"run{next(runs)}"
        work.mkdir()
        with contextlib.suppress(subprocess.TimeoutExpired):
            _run_sandboxed(f"timeout -s KILL 5 bash -c {quote(command)}", work)
        marked = (work / "M").exists()
        shutil.rmtree(work, ignore_errors=True)
        side = "admitted" if admitted else "refused"
        stats[side] += 1
        stats[f"{side}, marker created"] += marked
        assert not (admitted and marked), command

    check()
    print(f"\nbuiltins and wrappers run by bash in bubblewrap: {dict(stats)}")
    # Both sides were exercised: some commands were admitted, and payloads do work.
    assert stats["admitted"] and stats["refused, marker created"]
