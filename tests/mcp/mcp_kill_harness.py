"""Fault injection on MCP servers: SIGKILL a stdio and a streamable-HTTP server mid-call.

A campaign runs rounds until it has sent the asked number of kills. Each round
starts a fault server over streamable HTTP on 127.0.0.1 (``mcp_fault_server.py``)
and a :class:`~zuno.session.runtime.Runtime` that connects it and a stdio fault server
itself, as the CLI's runtime does. It dispatches one step of calls that run
together: a ``slow`` call to each server (it records the call, waits a random
while, then answers; declared SideEffecting / Never / ParallelSafe in the
configuration) beside built-in ``read`` and ``grep`` calls. While the step
runs, one or both servers are killed with SIGKILL: most often just after the
server recorded the call (so the kill is mid-call for certain), otherwise
after a random delay (before the call, mid-call or after the answer). A second
step then calls both servers again (one of them is dead) beside a ``read``.

After each round, from the store's rows and the servers' own records:

- nothing escaped ``dispatch`` or the runtime (a runtime crash), nothing hung;
- the built-in calls of both steps are ``ok``;
- no row is left ``started``;
- a call the server recorded is ``ok`` or ``uncertain``, never stored as not
  run (``blocked``); an ``ok`` row has its record; no call is recorded twice;
- the runtime still answers a ``read`` afterwards.

``bench/crash_injection.py --mcp-kills N`` and ``test_mcp_kill_campaign.py``
both run :func:`run_mcp_campaign`.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import anyio

from zuno.config.loading import Config
from zuno.core.declarations import Outcome
from zuno.dispatch.dispatcher import CallRequest, CallResult
from zuno.durability.store.records import CallRecord
from zuno.integrations.mcp.client import McpServerError
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

__all__ = ["McpKillFigures", "describe", "figures_table", "run_mcp_campaign"]

FAULT = Path(__file__).with_name("mcp_fault_server.py")
_STEP_DEADLINE = 120.0
"""A step that has not returned by then is a hang (a bound, far above any real step)."""


@dataclass(slots=True)
class McpKillFigures:
    """What a campaign did and saw; ``violations`` lists what must not happen."""

    rounds: int = 0
    kills: int = 0
    stdio_kills: int = 0
    http_kills: int = 0
    aimed_mid_call: int = 0
    """Kills sent once the server had recorded the call (certainly mid-call)."""
    landed_mid_call: int = 0
    """Calls the server recorded whose answer never came (stored ``uncertain``)."""
    blocked_unavailable: int = 0
    """Calls to a dead server refused before anything was sent."""
    mcp_ok: int = 0
    builtin_ok: int = 0
    startup_failures: int = 0
    runtime_crashes: int = 0
    hangs: int = 0
    builtin_failures: int = 0
    rows_left_started: int = 0
    recorded_but_not_run: int = 0
    ok_without_record: int = 0
    recorded_twice: int = 0
    unusable_after: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=lambda: [])


_MUST_BE_ZERO = (
    "runtime_crashes",
    "hangs",
    "builtin_failures",
    "rows_left_started",
    "recorded_but_not_run",
    "ok_without_record",
    "recorded_twice",
    "unusable_after",
    "startup_failures",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(slots=True)
class _HttpServer:
    """A fault server process serving streamable HTTP, started ahead of its round."""

    proc: subprocess.Popen[bytes]
    port: int
    marks: Path

    @classmethod
    def spawn(cls, marks: Path) -> _HttpServer:
        marks.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, str(FAULT), "http", str(port)],
            env={**os.environ, "FAULT_MARKS": str(marks)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return cls(proc, port, marks)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def wait_listening(self) -> None:
        for _ in range(1200):
            if self.proc.poll() is not None:
                raise RuntimeError("the HTTP fault server exited before listening")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"the HTTP fault server never listened on {self.port}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=60)


def _config(stdio_marks: Path, url: str) -> Config:
    stdio_marks.mkdir(parents=True, exist_ok=True)
    declared = {name: {"concurrency": "parallel_safe"} for name in ("slow", "touch")}
    config = Config.model_validate(
        {
            "mcp": {
                "servers": {
                    "s": {
                        "command": sys.executable,
                        "args": [str(FAULT)],
                        "env": {"FAULT_MARKS": str(stdio_marks)},
                        "sandbox": False,  # it leaves marks outside the workspace
                        "tools": declared,
                        "call_timeout": 60,
                    },
                    "h": {"url": url, "tools": declared, "call_timeout": 60},
                }
            }
        }
    )
    # The second step must reach the servers whatever the first one left
    # uncertain: the inspection rule is not what this campaign measures.
    config.replay.require_inspection = False
    return config


def _records(marks: Path) -> list[str]:
    try:
        return (marks / "calls.log").read_text().splitlines()
    except FileNotFoundError:
        return []


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


async def _dispatch(
    rt: Runtime, session: Any, calls: list[CallRequest], fig: McpKillFigures, notes: list[str]
) -> list[CallResult]:
    try:
        with anyio.fail_after(_STEP_DEADLINE):
            return await rt.dispatch(session, calls)
    except TimeoutError:
        fig.hangs += 1
        notes.append("a step did not return")
    except Exception as exc:
        fig.runtime_crashes += 1
        notes.append(f"dispatch raised {type(exc).__name__}: {exc}")
    return []


async def _exercise(
    rt: Runtime,
    number: int,
    rng: random.Random,
    stdio_marks: Path,
    http: _HttpServer,
    victims: tuple[str, ...],
    aimed: bool,
    fig: McpKillFigures,
    notes: list[str],
) -> None:
    """The two steps of one round, the kills while the first runs, and the checks."""
    tags = {name: f"r{number}-{name}" for name in ("s", "h")}
    http_marks = http.marks
    pids = {"s": int((stdio_marks / "server.pid").read_text()), "h": http.proc.pid}
    session = rt.open_session()
    first = [
        CallRequest("read", {"path": "notes.txt"}),
        *(
            CallRequest(
                f"mcp__{name}__slow",
                {"tag": tags[name], "seconds": round(rng.uniform(0.05, 0.5), 3)},
            )
            for name in ("s", "h")
        ),
        CallRequest("grep", {"pattern": "beta"}),
        CallRequest("read", {"path": "notes.txt"}),
    ]
    marks = {"s": stdio_marks, "h": http_marks}
    delay = rng.uniform(0.0, 0.4)

    async def killer() -> None:
        for name in victims:
            if aimed:
                with anyio.move_on_after(30):
                    # The server's record is a file: there is no event to wait on.
                    while f"slow {tags[name]}" not in _records(marks[name]):  # noqa: ASYNC110
                        await anyio.sleep(0.005)
                fig.aimed_mid_call += 1
            else:
                await anyio.sleep(delay)
            if _kill(pids[name]):
                fig.kills += 1
                if name == "s":
                    fig.stdio_kills += 1
                else:
                    fig.http_kills += 1

    results: list[CallResult] = []

    async def step() -> None:
        results.extend(await _dispatch(rt, session, first, fig, notes))

    async with anyio.create_task_group() as tg:
        tg.start_soon(killer)
        tg.start_soon(step)
    second = [
        CallRequest("mcp__s__touch", {"tag": f"{tags['s']}-after"}),
        CallRequest("mcp__h__touch", {"tag": f"{tags['h']}-after"}),
        CallRequest("read", {"path": "notes.txt"}),
    ]
    results += await _dispatch(rt, session, second, fig, notes)
    check = await _dispatch(rt, session, [CallRequest("read", {"path": "."})], fig, notes)
    if not check or check[0].outcome is not Outcome.OK:
        fig.unusable_after += 1
        notes.append("the runtime could not read after the kills")
    _check_round(rt, session.session_id, results, marks, fig, notes)


async def _round(
    root: Path,
    number: int,
    rng: random.Random,
    db: Path,
    fig: McpKillFigures,
    budget: int,
    http: _HttpServer,
) -> None:
    notes: list[str] = []
    workspace = root / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    stdio_marks = root / f"r{number}-s"
    try:
        http.wait_listening()
    except RuntimeError as exc:
        fig.startup_failures += 1
        fig.violations.append(f"round {number}: {exc}")
        return
    url = http.url
    victims = rng.choices([("s",), ("h",), ("s", "h")], weights=[1, 1, 2])[0][:budget]
    aimed = rng.random() < 0.7
    rt = Runtime(workspace, config=_config(stdio_marks, url), db_path=db, approver=ApproveAll())
    try:
        try:
            await rt.__aenter__()
        except McpServerError as exc:
            fig.startup_failures += 1
            notes.append(f"startup: {exc}")
            return
        crash: BaseException | None = None
        try:
            await _exercise(rt, number, rng, stdio_marks, http, victims, aimed, fig, notes)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # a crash, a cancel from a broken task group included
            crash = exc
            fig.runtime_crashes += 1
            notes.append(f"the runtime crashed: {type(exc).__name__}: {exc}")
        try:
            await rt.__aexit__(None, None, None)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            if crash is None:
                fig.runtime_crashes += 1
                notes.append(f"closing the runtime raised {type(exc).__name__}: {exc}")
    finally:
        rt.close()
        http.stop()
        fig.rounds += 1
        fig.violations += [f"round {number}: {note}" for note in notes]


def _check_round(
    rt: Runtime,
    session_id: str,
    results: list[CallResult],
    marks: dict[str, Path],
    fig: McpKillFigures,
    notes: list[str],
) -> None:
    rows = rt.store.calls(session_id)
    for row in rows:
        if row.status != "finished" or row.outcome is None:
            fig.rows_left_started += 1
            notes.append(f"{row.tool} {row.call_id} left {row.status}")
    for result in results:
        if result.tool.startswith("mcp__"):
            continue
        if result.outcome is Outcome.OK:
            fig.builtin_ok += 1
        else:
            fig.builtin_failures += 1
            notes.append(f"built-in {result.tool} ended {result.outcome.value}")
    recorded = {name: _records(path) for name, path in marks.items()}
    for name, lines in recorded.items():
        for line in set(lines):
            if lines.count(line) > 1:
                fig.recorded_twice += 1
                notes.append(f"server {name} recorded {line!r} {lines.count(line)} times")
    for row in rows:
        if row.tool.startswith("mcp__"):
            _, server, tool = row.tool.split("__")
            _check_mcp_row(row, f"{tool} {_tag(row.arguments)}" in recorded[server], fig, notes)


def _check_mcp_row(row: CallRecord, reached: bool, fig: McpKillFigures, notes: list[str]) -> None:
    """One MCP call's row against whether its server recorded receiving it."""
    what = f"{row.tool} {_tag(row.arguments)}"
    if row.outcome == Outcome.OK.value:
        fig.mcp_ok += 1
        if not reached:
            fig.ok_without_record += 1
            notes.append(f"{what} ok but never recorded by the server")
    elif row.outcome == Outcome.BLOCKED.value:
        fig.blocked_unavailable += row.block_kind == "unavailable"
        if reached:
            fig.recorded_but_not_run += 1
            notes.append(f"{what} reached the server but is stored blocked")
    elif row.outcome == Outcome.UNCERTAIN.value and reached:
        fig.landed_mid_call += 1


def _tag(arguments: str) -> str:
    import json

    value: Any = json.loads(arguments).get("tag", "")
    return str(value)


async def _campaign(root: Path, kills: int, seed: int) -> McpKillFigures:
    rng = random.Random(seed)
    fig = McpKillFigures()
    db = root / "zuno.db"
    started = time.monotonic()
    number = 0
    # Each round's HTTP server starts during the round before (a Python start is
    # seconds on a loaded machine).
    upcoming = _HttpServer.spawn(root / "round-1-h")
    try:
        while fig.kills < kills and number < kills * 3:  # a round may kill none (a dead pid)
            number += 1
            current, upcoming = upcoming, _HttpServer.spawn(root / f"round-{number + 1}-h")
            round_root = root / f"round-{number}"
            round_root.mkdir()
            await _round(round_root, number, rng, db, fig, kills - fig.kills, current)
    finally:
        upcoming.stop()
    fig.seconds = round(time.monotonic() - started, 1)
    return fig


def run_mcp_campaign(root: Path, kills: int, *, seed: int) -> McpKillFigures:
    """Run rounds until ``kills`` SIGKILLs were sent to MCP servers; the figures."""
    return anyio.run(_campaign, root, kills, seed)


def figures_table(fig: McpKillFigures) -> list[tuple[str, str]]:
    """The figures as table rows (label, value); the must-be-0 rows say so."""
    labels = {
        "rounds": "rounds (a runtime, a stdio and an HTTP server each)",
        "kills": "kills (SIGKILL of a server)",
        "stdio_kills": "of which stdio servers",
        "http_kills": "of which HTTP servers",
        "aimed_mid_call": "aimed after the server recorded the call",
        "landed_mid_call": "calls recorded by the server, answer lost (uncertain)",
        "blocked_unavailable": "calls to a dead server, blocked: unavailable",
        "mcp_ok": "MCP calls ok",
        "builtin_ok": "built-in calls ok in the same steps",
        "seconds": "time (s)",
    }
    rows: list[tuple[str, str]] = []
    for f in fields(McpKillFigures):
        if f.name == "violations":
            continue
        value = getattr(fig, f.name)
        if f.name in _MUST_BE_ZERO:
            rows.append((f"{f.name.replace('_', ' ')} (must be 0)", str(value)))
        else:
            rows.append((labels.get(f.name, f.name), str(value)))
    return rows


def describe(fig: McpKillFigures) -> str:
    """The violations, one a line (at most 50)."""
    return "\n".join(fig.violations[:50])
