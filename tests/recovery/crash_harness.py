"""Fault injection: sessions of side-effecting calls killed with SIGKILL, then resumed.

A campaign runs rounds. In each round a forked child process opens its own
:class:`~zuno.session.runtime.Runtime` on a shared SQLite file, resumes the session and
behaves like an agent that keeps working: it asks for ``append`` calls (each
appends a unique id to the session's effects file) mixed with read-only
``peek`` calls, several per step. The parent kills the child with SIGKILL after
a random delay; in some rounds the child kills itself inside a chosen
``append`` call, just before or just after its effect, so those two windows
are always covered whatever the machine's load.

After every kill the parent checks the store against the effects file,
settles the dead child's calls the way a resume does (``open_session``), and
checks the recovery notice, then starts the next child. The properties:

- no id appears twice in an effects file (no call ran twice);
- every effect has a row: ``started`` before settling, ``ok`` or ``uncertain`` after;
- every call the child saw complete (it writes an ack after ``dispatch``
  returned) still has its ``ok`` row: no committed result was lost;
- after a settle no row is left ``started``, and before one, only the killed
  child's rows can be;
- every uncertain row is in the first recovery notice issued after it became
  uncertain (or in the pending one, when none was issued since).

The test (``test_crash_safety.py``) and the benchmark (``bench/crash_injection.py``)
both run :func:`run_campaign`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar, Literal

import anyio
from pydantic import Field

from zuno.config.loading import Config
from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolResult
from zuno.core.declarations import (
    INSPECTION,
    BlockKind,
    Concurrency,
    Declaration,
    Effect,
    Outcome,
    Replay,
)
from zuno.dispatch.dispatcher import CallRequest
from zuno.durability.recovery import RecoveryNotice, issue_notice, pending_notice
from zuno.durability.store import Store
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

__all__ = [
    "AppendTool",
    "ChildPlan",
    "Figures",
    "ParentChecks",
    "PeekTool",
    "SelfKill",
    "acks_path",
    "check_store",
    "child_main",
    "describe",
    "effects_path",
    "figures_table",
    "make_runtime",
    "run_campaign",
    "warm_up",
]

Phase = Literal["before_effect", "after_effect"]
_PHASES: tuple[Phase, ...] = ("before_effect", "after_effect")

# Between the committed `started` row, the effect and the committed result,
# these awaits open windows wide enough for a random kill to land in.
_JITTER = 0.002
# A child that is neither killed nor finished by then is stuck: a harness bug.
_CHILD_DEADLINE = 60.0


def effects_path(workspace: Path, session_id: str) -> Path:
    """The file the ``append`` calls of a session write to, one id a line."""
    return workspace / f"effects-{session_id}.txt"


def acks_path(workspace: Path, session_id: str) -> Path:
    """The ids of the ``append`` calls a child saw complete (dispatch returned ``ok``)."""
    return workspace / f"acks-{session_id}.txt"


def _append_line(path: Path, line: str) -> None:
    # One write(2) with O_APPEND: a SIGKILL cannot tear it, and the page cache
    # outlives the process, so no fsync is needed against kill -9.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


@dataclass(frozen=True, slots=True)
class SelfKill:
    """Kill the child inside its ``call``-th ``append`` run (1-based), at ``phase``."""

    call: int
    phase: Phase


class AppendArgs(ToolArgs):
    id: str = Field(min_length=1, max_length=40)


class AppendTool(Tool[AppendArgs]):
    """Appends its id to the session's effects file: an observable side effect."""

    name: ClassVar[str] = "append"
    description: ClassVar[str] = "Append an id to the effects file."
    args_model = AppendArgs
    declaration: ClassVar[Declaration] = Declaration(
        Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.EXCLUSIVE
    )

    def __init__(self, self_kill: SelfKill | None = None) -> None:
        self.self_kill = self_kill
        self.runs = 0

    def _maybe_die(self, phase: Phase) -> None:
        if self.self_kill == SelfKill(self.runs, phase):
            os.kill(os.getpid(), signal.SIGKILL)

    async def run(self, args: AppendArgs, ctx: ToolContext) -> ToolResult:
        self.runs += 1
        await anyio.sleep(random.uniform(0, _JITTER))
        self._maybe_die("before_effect")
        _append_line(effects_path(ctx.workspace, ctx.session_id), args.id)
        self._maybe_die("after_effect")
        await anyio.sleep(random.uniform(0, _JITTER))
        return ToolResult(f"appended {args.id}")


class PeekArgs(ToolArgs):
    pass


class PeekTool(Tool[PeekArgs]):
    """Counts the lines of the effects file: the inspection a careful agent makes."""

    name: ClassVar[str] = "peek"
    description: ClassVar[str] = "Count the lines of the effects file."
    args_model = PeekArgs
    # It looks at the real state, so it satisfies the inspection rule (issue 9).
    declaration: ClassVar[Declaration] = INSPECTION

    async def run(self, args: PeekArgs, ctx: ToolContext) -> ToolResult:
        await anyio.sleep(random.uniform(0, _JITTER))
        count = len(_lines(effects_path(ctx.workspace, ctx.session_id)))
        return ToolResult(f"{count} lines")


def make_runtime(workspace: Path, db: Path, self_kill: SelfKill | None = None) -> Runtime:
    """A runtime with only the two test tools, approving everything (``--yes``)."""
    return Runtime(
        workspace,
        config=Config(),
        db_path=db,
        approver=ApproveAll(),
        tools=[AppendTool(self_kill), PeekTool()],
    )


# The child: an agent that continues ---------------------------------------------


@dataclass(frozen=True, slots=True)
class ChildPlan:
    workspace: Path
    db: Path
    session_id: str
    seed: int
    recover: bool
    """Whether the child settles and issues the recovery notice itself (else the parent did)."""
    self_kill: SelfKill | None


def _done_ids(store: Store, session_id: str) -> set[str]:
    # An id with a row that is not `blocked` ran, may have run, or is running:
    # an agent that continues never asks for it again. A blocked id did not
    # run, so it may be asked for again (which also tests "blocked means nothing ran").
    rows = store.query(
        "SELECT arguments FROM calls WHERE session_id = ? AND tool = 'append'"
        " AND (outcome IS NULL OR outcome != 'blocked')",
        (session_id,),
    )
    return {json.loads(r[0])["id"] for r in rows}


def _next_ids(store: Store, session_id: str, count: int) -> list[str]:
    done = _done_ids(store, session_id)
    ids: list[str] = []
    n = 0
    while len(ids) < count:
        candidate = f"e{n:05d}"
        if candidate not in done:
            ids.append(candidate)
        n += 1
    return ids


def _step(rng: random.Random, ids: list[str]) -> list[CallRequest]:
    """One model step: appends alone, or beside parallel read-only peeks."""
    peek = CallRequest("peek", {})
    appends = [CallRequest("append", {"id": i}) for i in ids]
    shape = rng.randrange(4)
    if shape == 0:
        return appends[:1]
    if shape == 1:
        return [peek, appends[0]]
    if shape == 2:
        return [peek, peek, appends[0], peek, appends[1]]
    return [appends[0], peek, peek, appends[1], appends[2]]


async def _drive(plan: ChildPlan) -> None:
    rt = make_runtime(plan.workspace, plan.db, plan.self_kill)
    session = rt.open_session(plan.session_id)  # settles what a dead process left
    if plan.recover:
        notice = pending_notice(rt.store, session.session_id)
        if notice is not None:
            issue_notice(rt.store, notice)  # as the recovery turn would
    rng = random.Random(plan.seed)
    acks = acks_path(plan.workspace, plan.session_id)
    inspect = False
    while True:
        if inspect:
            step = [CallRequest("peek", {})]
        else:
            step = _step(rng, _next_ids(rt.store, session.session_id, 3))
        results = await rt.dispatch(session, step)
        for r in results:
            if r.tool == "append" and r.outcome is Outcome.OK:
                _append_line(acks, r.call_id)
        # Refused for want of an inspection: look at the real state, then go on.
        inspect = any(r.block_kind is BlockKind.DENIED for r in results)


def child_main(plan: ChildPlan, error_path: Path) -> None:
    """The body of a forked child: drive the session until killed."""
    random.seed(plan.seed)
    try:
        anyio.run(_drive, plan)
    except BaseException:
        error_path.write_text(traceback.format_exc())
        os._exit(1)


# The parent: kill, check, settle, notice ----------------------------------------


@dataclass(slots=True)
class ParentChecks:
    """What one look at the store and the effects found (violations must stay 0)."""

    double_effects: int = 0
    ids_run_twice: int = 0
    effects_without_row: int = 0
    ok_rows_without_effect: int = 0
    lost_results: int = 0
    stray_started_rows: int = 0
    missing_from_notice: int = 0
    details: list[str] = field(default_factory=lambda: [])

    def add(self, other: ParentChecks) -> None:
        for f in fields(self):
            if f.name == "details":
                self.details.extend(other.details)
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def _notice_misses(store: Store, session_id: str, pending: RecoveryNotice | None) -> list[str]:
    """Uncertain rows absent from the first notice issued after they became uncertain."""
    notices: list[tuple[float, set[str]]] = []
    # The table exists once a notice was asked for (recovery creates it lazily).
    if store.query("SELECT 1 FROM sqlite_master WHERE name = 'recovery_notices'"):
        notices = [
            (float(at), set(json.loads(ids)))
            for at, ids in store.query(
                "SELECT created_at, call_ids FROM recovery_notices WHERE session_id = ?"
                " ORDER BY attempt",
                (session_id,),
            )
        ]
    pending_ids = {i.call_id for i in pending.items} if pending else set[str]()
    misses: list[str] = []
    for call_id, finished_at in store.query(
        "SELECT call_id, finished_at FROM calls WHERE session_id = ? AND outcome = 'uncertain'",
        (session_id,),
    ):
        following = next((ids for at, ids in notices if at >= finished_at), None)
        if following is not None:
            if call_id not in following:
                misses.append(call_id)
        elif call_id not in pending_ids or pending is None or call_id not in pending.text:
            misses.append(call_id)
    return misses


def check_store(
    store: Store,
    workspace: Path,
    session_id: str,
    *,
    settled: bool,
    dead_pids: frozenset[int] = frozenset(),
    pending: RecoveryNotice | None = None,
) -> ParentChecks:
    """Check the properties of one session against its effects and acks files.

    ``settled`` says whether the parent settled interrupted calls since the
    last kill: then no row may be ``started``, and every uncertain row must be
    in its next notice (``pending`` is the notice a recovery turn would get
    now). Otherwise only rows of children killed since the parent's last
    settle (``dead_pids``) may be ``started``: a child that resumed and ran
    calls must have settled the ones before it, unless it was killed while
    resuming.
    """
    out = ParentChecks()
    effects = _lines(effects_path(workspace, session_id))
    counts = Counter(effects)
    doubled = sorted(i for i, n in counts.items() if n > 1)
    out.double_effects = len(doubled)
    out.details += [f"{session_id}: effect {i} happened {counts[i]} times" for i in doubled]

    rows = store.query(
        "SELECT call_id, arguments, status, outcome, runner FROM calls"
        " WHERE session_id = ? AND tool = 'append'",
        (session_id,),
    )
    ran: Counter[str] = Counter()
    covered: set[str] = set()  # ids whose effect is accounted for by a row
    ok_ids: set[str] = set()
    ok_calls: set[str] = set()
    for call_id, arguments, status, outcome, runner in rows:
        arg_id: str = json.loads(arguments)["id"]
        if outcome == Outcome.BLOCKED.value:
            continue
        ran[arg_id] += 1
        if status == "started":
            if settled or int(str(runner).split(":")[-2]) not in dead_pids:
                out.stray_started_rows += 1
                out.details.append(f"{session_id}: call {call_id} still started ({runner})")
            else:
                covered.add(arg_id)
        elif outcome in (Outcome.OK.value, Outcome.UNCERTAIN.value):
            covered.add(arg_id)
        if outcome == Outcome.OK.value:
            ok_ids.add(arg_id)
            ok_calls.add(call_id)
    twice = sorted(i for i, n in ran.items() if n > 1)
    out.ids_run_twice = len(twice)
    out.details += [f"{session_id}: id {i} has {ran[i]} executed rows" for i in twice]
    orphans = sorted(set(counts) - covered)
    out.effects_without_row = len(orphans)
    out.details += [f"{session_id}: effect {i} has no ok/uncertain/started row" for i in orphans]
    phantom = sorted(ok_ids - set(counts))
    out.ok_rows_without_effect = len(phantom)
    out.details += [f"{session_id}: id {i} is ok but its effect is missing" for i in phantom]
    lost = sorted(set(_lines(acks_path(workspace, session_id))) - ok_calls)
    out.lost_results = len(lost)
    out.details += [f"{session_id}: call {c} completed but its ok row is gone" for c in lost]
    if settled:
        misses = _notice_misses(store, session_id, pending)
        out.missing_from_notice = len(misses)
        out.details += [f"{session_id}: uncertain {c} missing from the next notice" for c in misses]
    return out


@dataclass(slots=True)
class Figures:
    """The totals of a campaign."""

    kills: int = 0
    self_kills: int = 0
    kills_before_first_call: int = 0
    kills_between_calls: int = 0
    kills_after_intent_before_effect: int = 0
    kills_after_effect_before_result: int = 0
    sessions: int = 0
    calls_completed: int = 0
    effects: int = 0
    uncertain_rows: int = 0
    uncertain_with_effect: int = 0
    notices_issued: int = 0
    seconds: float = 0.0
    checks: ParentChecks = field(default_factory=ParentChecks)

    @property
    def violations(self) -> int:
        c = self.checks
        return (
            c.double_effects
            + c.ids_run_twice
            + c.effects_without_row
            + c.ok_rows_without_effect
            + c.lost_results
            + c.stray_started_rows
            + c.missing_from_notice
        )


def _sample_delay(rng: random.Random) -> float:
    # A warmed-up child needs some 10-40 ms to start (fork, Runtime, resume,
    # event loop) and then runs a call every few ms: a fifth of the kills
    # aim at startup, the rest at dispatches.
    if rng.random() < 0.2:
        return rng.uniform(0.0, 0.03)
    return rng.uniform(0.03, 0.15)


def warm_up(root: Path) -> None:
    """Dispatch once in the parent, so forked children inherit every lazy import.

    Without it each child spends ~150 ms importing anyio's backend and the
    dispatcher's lazy modules, and most random kills land in that import.
    """
    root.mkdir(parents=True, exist_ok=True)
    rt = make_runtime(root, root / "warm.db")
    try:
        session = rt.open_session()
        anyio.run(
            rt.dispatch, session, [CallRequest("peek", {}), CallRequest("append", {"id": "w"})]
        )
    finally:
        rt.close()


def _classify(
    store: Store, workspace: Path, session_id: str, pid: int, rows_before: int, fig: Figures
) -> None:
    """Where the last kill landed, read from the rows the killed child left ``started``."""
    total = store.query("SELECT COUNT(*) FROM calls WHERE session_id = ?", (session_id,))[0][0]
    started = store.query(
        "SELECT arguments FROM calls WHERE session_id = ? AND tool = 'append'"
        " AND status = 'started' AND (runner LIKE ? OR runner LIKE ?)",
        (session_id, f"{pid}:%", f"w1:%:{pid}:%"),
    )
    effects = set(_lines(effects_path(workspace, session_id)))
    if started:
        for (arguments,) in started:
            if json.loads(arguments)["id"] in effects:
                fig.kills_after_effect_before_result += 1
            else:
                fig.kills_after_intent_before_effect += 1
    elif total == rows_before:
        fig.kills_before_first_call += 1
    else:
        fig.kills_between_calls += 1


def _recover(rt: Runtime, workspace: Path, session_id: str) -> ParentChecks:
    """Resume as a new process would, check, and issue the notice."""
    rt.open_session(session_id)  # settles the dead child's calls
    pending = pending_notice(rt.store, session_id)
    checks = check_store(rt.store, workspace, session_id, settled=True, pending=pending)
    if pending is not None:
        issue_notice(rt.store, pending)
    return checks


def _run_child(plan: ChildPlan, error_path: Path, delay: float) -> tuple[int, int | None]:
    """Start a child, kill it after ``delay`` (unless it kills itself); its pid and exit code."""
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=child_main, args=(plan, error_path), daemon=True)
    proc.start()
    proc.join(_CHILD_DEADLINE if plan.self_kill else delay)
    if proc.exitcode is None:
        proc.kill()
        proc.join()  # reaped: a zombie would still look alive to settle_interrupted
    assert proc.pid is not None
    return proc.pid, proc.exitcode


def _totals(store: Store, workspace: Path, session_id: str, fig: Figures) -> None:
    fig.effects += len(_lines(effects_path(workspace, session_id)))
    for outcome, n in store.query(
        "SELECT outcome, COUNT(*) FROM calls WHERE session_id = ? AND tool = 'append'"
        " GROUP BY outcome",
        (session_id,),
    ):
        if outcome == Outcome.OK.value:
            fig.calls_completed += n
        elif outcome == Outcome.UNCERTAIN.value:
            fig.uncertain_rows += n
    effects = set(_lines(effects_path(workspace, session_id)))
    for (arguments,) in store.query(
        "SELECT arguments FROM calls WHERE session_id = ? AND outcome = 'uncertain'",
        (session_id,),
    ):
        fig.uncertain_with_effect += json.loads(arguments)["id"] in effects
    (notices,) = store.query(
        "SELECT COUNT(*) FROM recovery_notices WHERE session_id = ?", (session_id,)
    )[0]
    fig.notices_issued += notices


def run_campaign(
    root: Path,
    kills: int,
    *,
    seed: int,
    kills_per_session: int = 25,
    self_kill_share: float = 0.2,
    child_recovers_share: float = 0.3,
) -> Figures:
    """Run ``kills`` kill-and-resume rounds in ``root`` and return the figures.

    Sessions rotate every ``kills_per_session`` kills, so the per-step queries
    stay the size of one session. In ``child_recovers_share`` of the rounds the
    child itself settles and issues the notice (so kills also land there); in
    the others the parent does it and checks the notice right away.
    """
    rng = random.Random(seed)
    workspace = root / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    db = root / "crash.db"
    error_path = root / "child-error.txt"
    fig = Figures()
    started = time.perf_counter()
    warm_up(root / "warm-up")
    session_id = ""
    dead: set[int] = set()  # children killed since the parent last settled
    for round_no in range(kills):
        rt = make_runtime(workspace, db)
        try:
            if round_no % kills_per_session == 0:
                if session_id:
                    fig.checks.add(_recover(rt, workspace, session_id))
                    _totals(rt.store, workspace, session_id, fig)
                session_id = rt.open_session().session_id
                fig.sessions += 1
                dead.clear()
            recover_in_child = rng.random() < child_recovers_share
            if not recover_in_child and dead:
                fig.checks.add(_recover(rt, workspace, session_id))
                dead.clear()
            rows_before = rt.store.query(
                "SELECT COUNT(*) FROM calls WHERE session_id = ?", (session_id,)
            )[0][0]
        finally:
            rt.close()  # never carry a SQLite connection across fork

        self_kill = None
        if rng.random() < self_kill_share:
            self_kill = SelfKill(rng.randint(1, 4), rng.choice(_PHASES))
        plan = ChildPlan(
            workspace, db, session_id, rng.getrandbits(32), recover_in_child, self_kill
        )
        error_path.unlink(missing_ok=True)
        pid, exitcode = _run_child(plan, error_path, _sample_delay(rng))
        if exitcode != -signal.SIGKILL:
            detail = error_path.read_text() if error_path.exists() else "(no traceback)"
            raise RuntimeError(f"the child exited with {exitcode} instead of dying:\n{detail}")
        fig.kills += 1
        fig.self_kills += self_kill is not None
        dead.add(pid)

        rt = make_runtime(workspace, db)
        try:
            _classify(rt.store, workspace, session_id, pid, rows_before, fig)
            fig.checks.add(
                check_store(
                    rt.store, workspace, session_id, settled=False, dead_pids=frozenset(dead)
                )
            )
        finally:
            rt.close()
    if session_id:
        rt = make_runtime(workspace, db)
        try:
            fig.checks.add(_recover(rt, workspace, session_id))
            _totals(rt.store, workspace, session_id, fig)
        finally:
            rt.close()
    fig.seconds = time.perf_counter() - started
    return fig


def figures_table(fig: Figures) -> list[tuple[str, str]]:
    """The figures as (label, value) rows, violations marked ``must be 0``."""
    c = fig.checks
    return [
        ("kills (SIGKILL)", str(fig.kills)),
        ("  of which self-kills inside append", str(fig.self_kills)),
        ("  landed before the child's first call", str(fig.kills_before_first_call)),
        ("  landed outside any append (between calls, in a peek)", str(fig.kills_between_calls)),
        ("  landed after intent, before effect", str(fig.kills_after_intent_before_effect)),
        ("  landed after effect, before result", str(fig.kills_after_effect_before_result)),
        ("sessions", str(fig.sessions)),
        ("calls completed (append ok)", str(fig.calls_completed)),
        ("effects (lines appended)", str(fig.effects)),
        ("uncertain rows", str(fig.uncertain_rows)),
        ("  of which the effect happened", str(fig.uncertain_with_effect)),
        ("recovery notices issued", str(fig.notices_issued)),
        ("double effects (must be 0)", str(c.double_effects)),
        ("ids run twice (must be 0)", str(c.ids_run_twice)),
        ("effects without a row (must be 0)", str(c.effects_without_row)),
        ("ok rows without an effect (must be 0)", str(c.ok_rows_without_effect)),
        ("completed results lost (must be 0)", str(c.lost_results)),
        ("rows left started (must be 0)", str(c.stray_started_rows)),
        ("uncertain rows missing from next notice (must be 0)", str(c.missing_from_notice)),
        ("time", f"{fig.seconds:.1f} s"),
    ]


def describe(fig: Figures) -> str:
    """The table as text (for a failing assertion or the benchmark's output)."""
    rows = figures_table(fig)
    width = max(len(label) for label, _ in rows)
    lines = [f"{label.ljust(width)}  {value}" for label, value in rows]
    lines += fig.checks.details[:20]
    return "\n".join(lines)
