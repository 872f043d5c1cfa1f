"""Writes that cannot be raced: a symlink swapper against write, edit and apply_patch.

A real process atomically exchanges a folder of the workspace with a symlink
to a folder outside it (``renameat2`` with ``RENAME_EXCHANGE``), and a file of
the workspace with a symlink to a file outside, as fast as it can: started by
the test outside any sandbox, or as a background job of the shell tool under
bubblewrap and under Landlock. Meanwhile writes, edits and patches (add,
update, delete, move) run through the tools, some of them through the Python
API (:class:`zuno.session.runtime.Runtime` and its dispatcher): 2,160 in one run, 3,000
over the four setups. Judged on disk
afterwards: nothing outside changed, no temporary file was left anywhere,
every call that reported success made its change inside, and every refused
call changed nothing.

A second race swaps folders with links that stay inside the workspace but lead
into ``.git/hooks`` and a folder a deny rule covers, after the pre-flight has
checked the path: nothing may reach either.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from zuno.config.loading import Config
from zuno.config.permission import PermissionRule, PermissionSettings
from zuno.config.sandbox import SandboxSettings
from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolError, UncertainOutcome
from zuno.core.declarations import Outcome
from zuno.execution.sandbox.probing import probe_bubblewrap, probe_landlock
from zuno.policy.approvals import ApproveAll, CallbackApprover
from zuno.session.runtime import Runtime
from zuno.tools.edit import EditArgs, EditTool
from zuno.tools.patch import ApplyPatchArgs, ApplyPatchTool
from zuno.tools.write import WriteArgs, WriteTool
from zuno.workspace import beneath


@dataclass(frozen=True, slots=True)
class Setup:
    """One run of the race.

    Attributes:
        resolution: Who resolves paths: the kernel (``openat2``) or the
            component ``walk`` that replaces it on kernels without openat2.
        attacker: Where the swapper runs: a plain ``process`` started by the
            test, or a background job of the shell tool under ``bubblewrap`` or
            ``landlock`` (the issue's sandboxed background process).
        rounds: Each round runs one operation of each of the 8 kinds.
    """

    resolution: str
    attacker: str
    rounds: int


SETUPS = [
    Setup("openat2", "process", 270),  # 2,160 operations in one run
    Setup("walk", "process", 45),
    Setup("openat2", "bubblewrap", 30),
    Setup("openat2", "landlock", 30),
]
THROUGH_RUNTIME_EVERY = 9
"""Every 9th round sends its writes and patches through the Runtime's dispatcher."""

KINDS = ("write-new", "write-replace", "write-link", "edit", "add", "update", "delete", "move")

# The swapper exchanges two names atomically, so both always exist: at one
# moment ws/d is the real folder, at the next a symlink to the folder outside
# (and ws/t.txt a file or a symlink to a file outside).
_SWAPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
a = [p.encode() for p in sys.argv[1:5]]
pairs = [(a[0], a[1]), (a[2], a[3])]
stop = sys.argv[5]
swaps = 0
for n in range(1, 200_000_000):
    x, y = pairs[n % 2]
    if libc.renameat2(AT_FDCWD, x, AT_FDCWD, y, RENAME_EXCHANGE) == 0:
        swaps += 1
    if n == 2000:
        print("swapping", flush=True)
    if n % 256 == 0 and os.path.exists(stop):
        break
print(swaps, flush=True)
"""


@dataclass(slots=True)
class Arena:
    """The workspace under attack and the folder outside it."""

    root: Path
    ws: Path
    outside: Path

    def real_folder(self) -> Path:
        """Where the real folder is now (the swapper moves it between two names)."""
        for name in ("d", "d.swap"):
            candidate = self.ws / name
            if candidate.is_dir() and not candidate.is_symlink():
                return candidate
        raise AssertionError("the real folder is gone")


@dataclass(slots=True)
class Tally:
    """What happened to the operations."""

    counts: Counter[str] = field(default_factory=lambda: Counter[str]())
    results: dict[tuple[int, str], str] = field(default_factory=lambda: {})
    unexpected: list[str] = field(default_factory=lambda: [])

    def record(self, i: int, kind: str, how: str, what: str) -> None:
        self.results[(i, kind)] = what
        self.counts[f"{what} ({how})"] += 1


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under folder: bytes of files, link texts, folders."""
    out: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        key = path.relative_to(folder).as_posix()
        if path.is_symlink():
            out[key] = "-> " + os.readlink(path)
        elif path.is_dir():
            out[key] = "folder"
        else:
            out[key] = path.read_bytes()
    return out


def temporaries(folder: Path) -> list[str]:
    """Zuno's temporary and set-aside files left under folder."""
    return sorted(str(p) for p in folder.rglob("*") if ".zuno-" in p.name)


def old(i: int) -> str:
    return f"old {i}\n"


def new(i: int) -> str:
    return f"new {i}\n"


def prepare(arena: Arena, rounds: int) -> None:
    """Files every round works on, inside; identical decoys outside, so a write
    through the swapped symlink would succeed there (and be seen)."""
    d = arena.ws / "d"
    for i in range(rounds):
        for suffix in ("r", "e", "u", "x", "m"):
            (d / f"{i}.{suffix}").write_text(old(i))
            (arena.outside / f"{i}.{suffix}").write_text(old(i))


def call_for(i: int, kind: str) -> tuple[str, dict[str, Any]]:
    """The tool and arguments of operation kind in round i."""
    patch = {
        "add": [f"*** Add File: d/{i}.a", f"+new {i}"],
        "update": [f"*** Update File: d/{i}.u", f"-old {i}", f"+new {i}"],
        "delete": [f"*** Delete File: d/{i}.x"],
        "move": [f"*** Update File: d/{i}.m", f"*** Move to: d/{i}.mv", f"-old {i}", f"+new {i}"],
    }
    if kind == "write-new":
        return "write", {"path": f"d/n{i}/new.txt", "content": new(i)}
    if kind == "write-replace":
        return "write", {"path": f"d/{i}.r", "content": new(i)}
    if kind == "write-link":
        return "write", {"path": "t.txt", "content": new(i)}
    if kind == "edit":
        return "edit", {"path": f"d/{i}.e", "old_string": "old", "new_string": "new"}
    body = "\n".join(["*** Begin Patch", *patch[kind], "*** End Patch"]) + "\n"
    return "apply_patch", {"patch": body}


def check(real: Path, i: int, kind: str, what: str) -> str | None:
    """Why the files inside disagree with what the call reported, or None."""

    def text(name: str) -> str | None:
        path = real / name
        return path.read_text() if path.is_file() else None

    landed = what == "landed"
    expected: dict[str, str | None] = {
        "write-new": {f"n{i}/new.txt": new(i) if landed else None},
        "write-replace": {f"{i}.r": new(i) if landed else old(i)},
        "write-link": {},
        "edit": {f"{i}.e": new(i) if landed else old(i)},
        "add": {f"{i}.a": new(i) if landed else None},
        "update": {f"{i}.u": new(i) if landed else old(i)},
        "delete": {f"{i}.x": None if landed else old(i)},
        "move": {f"{i}.m": None if landed else old(i), f"{i}.mv": new(i) if landed else None},
    }[kind]
    for name, want in expected.items():
        got = text(name)
        if got != want:
            return f"round {i} {kind} {what}: {name} is {got!r}, expected {want!r}"
    return None


def context(ws: Path) -> ToolContext:
    return ToolContext(
        workspace=ws,
        session_id="race",
        call_id="race",
        attempt=1,
        limits=OutputLimits(),
        artifacts=ArtifactStore(ws.parent / "artifacts"),
        config=Config(),
    )


TOOLS: dict[str, tuple[Tool[Any], type[ToolArgs]]] = {
    "write": (WriteTool(), WriteArgs),
    "edit": (EditTool(), EditArgs),
    "apply_patch": (ApplyPatchTool(), ApplyPatchArgs),
}


async def run_direct(ctx: ToolContext, i: int, kind: str, tally: Tally) -> None:
    name, arguments = call_for(i, kind)
    tool, model = TOOLS[name]
    try:
        await tool.run(model.model_validate(arguments), ctx)
    except UncertainOutcome as error:
        tally.record(i, kind, "tool", "uncertain")
        tally.unexpected.append(f"round {i} {kind}: uncertain: {error}")
    except ToolError:
        tally.record(i, kind, "tool", "refused")
    except Exception as error:  # a defect; counted, so the attack's figures still show
        tally.record(i, kind, "tool", "crashed")
        tally.unexpected.append(f"round {i} {kind}: {type(error).__name__}: {error}")
    else:
        tally.record(i, kind, "tool", "landed")


async def run_dispatched(rt: Runtime, i: int, kind: str, tally: Tally) -> None:
    name, arguments = call_for(i, kind)
    # A fresh session each time: a failed Never call makes its session ask for
    # an inspection before the next change, which is not what is tested here.
    result = await rt.call(rt.open_session(), name, arguments)
    if result.outcome is Outcome.OK:
        tally.record(i, kind, "runtime", "landed")
    elif result.outcome in (Outcome.BLOCKED, Outcome.ERROR):
        tally.record(i, kind, "runtime", "refused")
        if "failed inside Zuno" in result.output:
            tally.unexpected.append(f"round {i} {kind}: {result.output}")
    else:
        tally.record(i, kind, "runtime", str(result.outcome))
        tally.unexpected.append(f"round {i} {kind}: {result.outcome}: {result.output}")


async def run_rounds(arena: Arena, setup: Setup, tally: Tally) -> int:
    """Run every operation; return how many swaps the attacker made meanwhile."""
    ctx = context(arena.ws)
    sandboxed = setup.attacker != "process"
    sandbox = SandboxSettings.model_validate({"kind": setup.attacker if sandboxed else "auto"})
    config = Config(sandbox=sandbox)
    rt = Runtime(arena.ws, config=config, db_path=arena.root / "z.db", approver=ApproveAll())
    try:
        async with rt:
            job = await start_sandboxed_swapper(rt, arena) if sandboxed else None
            for i in range(setup.rounds):
                for kind in KINDS:
                    if i % THROUGH_RUNTIME_EVERY == 0 and kind not in ("edit",):
                        await run_dispatched(rt, i, kind, tally)
                    else:
                        await run_direct(ctx, i, kind, tally)
            if job is None:
                return -1
            (arena.root / "stop").touch()
            session = rt.open_session()
            await rt.call(session, "bg", {"action": "wait", "job_id": job, "timeout": 60})
            output = await rt.call(session, "bg", {"action": "output", "job_id": job})
            counts = re.findall(r"^(\d+)$", output.output, re.MULTILINE)
            assert counts, output.output
            return int(counts[-1])
    finally:
        rt.close()


def swapper_argv(arena: Arena) -> list[str]:
    script = arena.root / "swapper.py"
    script.write_text(_SWAPPER)
    ws = arena.ws
    names = [ws / "d", ws / "d.swap", ws / "t.txt", ws / "t.swap", arena.root / "stop"]
    # The interpreter the venv was made from, not the venv's own: a sandbox with a
    # private /tmp cannot see a venv under /tmp (a checkout there), but the
    # swapper needs only the standard library.
    python = getattr(sys, "_base_executable", None) or sys.executable
    return [python, str(script), *map(str, names)]


async def start_sandboxed_swapper(rt: Runtime, arena: Arena) -> str:
    """Start the swapper as a background job of the shell tool, in its sandbox."""
    session = rt.open_session()
    command = shlex.join(swapper_argv(arena))
    started = await rt.call(session, "shell", {"command": command, "background": True})
    assert started.outcome is Outcome.OK and started.data is not None, started.output
    job = str(started.data["job_id"])
    for _ in range(600):  # until it has begun swapping (bounded: 60 s)
        output = await rt.call(session, "bg", {"action": "output", "job_id": job})
        if "swapping" in output.output:
            return job
        assert "exit code" not in output.output, output.output
        await anyio.sleep(0.1)
    raise AssertionError("the sandboxed swapper never started")


@pytest.fixture(params=SETUPS, ids=lambda s: f"{s.resolution}-{s.attacker}")
def setup(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Setup:
    chosen: Setup = request.param
    if chosen.resolution == "walk":
        monkeypatch.setattr(beneath, "_openat2_enabled", False)
    elif not beneath.openat2_available():
        pytest.skip("this kernel has no openat2")
    probe = {"bubblewrap": probe_bubblewrap, "landlock": probe_landlock}.get(chosen.attacker)
    if probe is not None and not probe().available:
        pytest.skip(f"{chosen.attacker} does not work here")
    return chosen


@pytest.fixture
def arena(tmp_path: Path, setup: Setup) -> Arena:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    (ws / "d").mkdir(parents=True)
    outside.mkdir()
    (ws / "d.swap").symlink_to(outside)
    (ws / "t.txt").write_text("inside\n")
    (outside / "t.txt").write_text("decoy outside\n")
    (ws / "t.swap").symlink_to(outside / "t.txt")
    arena = Arena(tmp_path, ws, outside)
    prepare(arena, setup.rounds)  # before the swapper starts
    return arena


@pytest.fixture
def swapper(arena: Arena, setup: Setup) -> Iterator[subprocess.Popen[str] | None]:
    """The attacker as a plain process, exchanging the names until told to stop."""
    if setup.attacker != "process":
        yield None  # started by the shell tool, inside the runtime
        return
    proc = subprocess.Popen(swapper_argv(arena), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "swapping"
        yield proc
    finally:
        (arena.root / "stop").touch()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_symlink_swapper_never_gets_a_write_outside(
    arena: Arena, setup: Setup, swapper: subprocess.Popen[str] | None
) -> None:
    outside_before = snapshot(arena.outside)
    tally = Tally()
    swaps = anyio.run(run_rounds, arena, setup, tally)
    if swapper is not None:
        (arena.root / "stop").touch()
        out, _ = swapper.communicate(timeout=60)
        swaps = int(out.split()[-1])

    landed = sum(n for key, n in tally.counts.items() if key.startswith("landed"))
    refused = sum(n for key, n in tally.counts.items() if key.startswith("refused"))
    print(
        f"\nwrite race: {len(tally.results)} operations, {landed} landed inside, "
        f"{refused} refused, {swaps} swaps; {dict(sorted(tally.counts.items()))}"
    )
    assert len(tally.results) == setup.rounds * len(KINDS)
    assert max(s.rounds for s in SETUPS) * len(KINDS) >= 2000
    assert swaps > 0

    outside_after = snapshot(arena.outside)
    changed = sorted(
        k
        for k in outside_before.keys() | outside_after.keys()
        if outside_before.get(k) != outside_after.get(k)
    )
    left = temporaries(arena.root)
    print(f"outside changed: {len(changed)}; temporaries left: {len(left)}")
    assert changed == [], f"{len(changed)} entries outside changed: {changed[:10]}"
    assert left == [], f"{len(left)} temporary files left: {left[:10]}"
    assert tally.unexpected == [], tally.unexpected[:10]

    real = arena.real_folder()
    wrong = [
        problem
        for (i, kind), what in sorted(tally.results.items())
        if what in ("landed", "refused") and (problem := check(real, i, kind, what)) is not None
    ]
    assert wrong == [], f"{len(wrong)} calls disagree with the files: {wrong[:10]}"
    assert landed > 0


# --- redirected inside the workspace ------------------------------------------------

REDIRECT_ROUNDS = 120
"""Each round writes and patch-adds one file in each of two swapped folders: 480 calls."""


async def run_redirected(ws: Path, db: Path, counts: Counter[str]) -> None:
    """Write into d/ and e/ while they are swapped with links to .git/hooks and secret/."""
    deny = PermissionRule(tool="*", pattern="secret/**", action="deny")
    config = Config(permission=PermissionSettings(rules=[deny]))
    # Approve everything but a control file: the user would say no to a git hook.
    approver = CallbackApprover(lambda request: "control file" not in request.reason)
    ctx = context(ws)
    ctx.config = config
    rt = Runtime(ws, config=config, db_path=db, approver=approver)
    try:
        async with rt:
            for i in range(REDIRECT_ROUNDS):
                for folder in ("d", "e"):
                    add = f"*** Begin Patch\n*** Add File: {folder}/a{i}\n+x\n*** End Patch\n"
                    calls = [
                        ("write", {"path": f"{folder}/w{i}", "content": "echo pwned\n"}),
                        ("apply_patch", {"patch": add}),
                    ]
                    for name, arguments in calls:
                        if i % 2:
                            result = await rt.call(rt.open_session(), name, arguments)
                            counts[f"{result.outcome.value} (runtime)"] += 1
                            continue
                        tool, model = TOOLS[name]
                        try:
                            await tool.run(model.model_validate(arguments), ctx)
                        except ToolError:
                            counts["refused (tool)"] += 1
                        else:
                            counts["landed (tool)"] += 1
    finally:
        rt.close()


def test_swapper_never_redirects_a_write_into_git_or_a_denied_folder(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    hooks = ws / ".git" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit.sample").write_text("sample\n")
    (ws / "secret").mkdir()
    (ws / "secret" / "key").write_text("k\n")
    for name, target in (("d", ".git/hooks"), ("e", "secret")):
        (ws / name).mkdir()
        (ws / f"{name}.swap").symlink_to(target)
    stop = tmp_path / "stop"
    script = tmp_path / "swapper.py"
    script.write_text(_SWAPPER)
    names = [ws / "d", ws / "d.swap", ws / "e", ws / "e.swap", stop]
    argv = [sys.executable, str(script), *map(str, names)]
    guarded = {"hooks": snapshot(hooks), "secret": snapshot(ws / "secret")}
    counts: Counter[str] = Counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "swapping"
        anyio.run(run_redirected, ws, tmp_path / "z.db", counts)
    finally:
        stop.touch()
        out, _ = proc.communicate(timeout=60)
    print(f"\nredirect race: {dict(sorted(counts.items()))}, swaps: {out.split()[-1]}")
    assert sum(counts.values()) == REDIRECT_ROUNDS * 4
    after = {"hooks": snapshot(hooks), "secret": snapshot(ws / "secret")}
    assert after == guarded
    assert temporaries(tmp_path) == []
    assert counts["landed (tool)"] + counts["ok (runtime)"] > 0
