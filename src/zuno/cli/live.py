"""The live view of ``zuno run``: a run shown as it happens.

The model's text streams to stdout. Everything else goes to stderr: each call
as it starts, named in plain words (``$ ls -la``, ``write notes.md (2 lines)``),
and as it settles, with what matters of its result (a patch's files, the user's
answer, a command's status and last lines) and, for a call that wrote files,
a coloured diff of what changed on disk. Child agents are indented under the
call that started them.

On a terminal, the calls still running (and the background jobs this process
started) stay at the bottom of the screen with their elapsed time; a command's
last lines of output show under it as they come. The bottom is redrawn by a
small thread a few times a second at most, from the files the output already
goes to (a command's artifacts, a job's log), so following it costs the run
nothing. It steps aside whenever a prompt asks something (see
:func:`zuno.core.tty.on_prompt`) and while the model's text is mid-line.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

from rich.console import Console
from rich.text import Text

from zuno.agent.loop import TurnStatus
from zuno.cli.output_tail import OutputTail
from zuno.cli.render import outcome_style, styled_diff
from zuno.contract.call_text import describe_call, file_diff, for_person, read_range, result_lines
from zuno.contract.events import Event
from zuno.core.tty import on_prompt
from zuno.dispatch.session_state import SessionState
from zuno.session.runtime import Runtime

__all__ = ["LiveView"]

_TICK_S = 0.25
"""How often the bottom of the screen may be redrawn (the rate limit)."""
_TAIL_LINES = 5
"""Lines of a running command's output kept on screen."""
_SNAPSHOT_MAX = 256 * 1024
"""Files larger than this are not diffed in results."""
_DIFF_LINES = 40


_MODE_NOTES = {
    "accept-edits": ": file edits in the workspace are no longer asked about; commands still are",
    "plan": ": only reads, questions and plan updates run",
    "permissive": ": nothing is asked",
}


def _first_line(text: str, width: int = 160) -> str:
    line = next((x for x in text.strip().splitlines() if x.strip()), "")
    return line if len(line) <= width else line[: width - 3] + "..."


def _elapsed(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole}s" if whole < 60 else f"{whole // 60}m{whole % 60:02d}s"


@dataclass
class _Running:
    """A call still running, or a background job of this process."""

    depth: int
    label: Text
    started: float
    tails: list[OutputTail] = field(default_factory=lambda: [])
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=_TAIL_LINES))
    job_id: str | None = None


class _Guarded:
    """A stand-in for sys.stdout or sys.stderr while the view draws at the bottom.

    Anything else writing to the terminal (a notice, a warning, a prompt) first
    has the running calls erased, so it never lands in the middle of them.
    """

    def __init__(self, view: LiveView, real: TextIO) -> None:
        self._view = view
        self.real = real

    def write(self, text: str) -> int:
        return self._view._foreign(self.real, text)  # pyright: ignore[reportPrivateUsage]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class LiveView:
    """Shows a run as it happens: streamed text on stdout, the rest on stderr."""

    def __init__(self, runtime: Runtime, console: Console | None = None) -> None:
        self._rt = runtime
        self._console = console or Console(stderr=True, highlight=False, soft_wrap=True)
        self._live = self._console.is_terminal
        self._depth: dict[str, int] = {}
        self._mid_line = False
        self._lock = threading.RLock()
        self._running: dict[str, _Running] = {}
        self._before: dict[str, dict[str, str | None]] = {}
        self._asked: set[str] = set()
        """Calls put to an approval prompt: it showed their change, the result does not again."""
        self._drawn = 0
        self._drawn_text = ""
        self._paused = False
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._out: TextIO = sys.stdout
        self._foreign_mid = False
        """Someone else left the cursor mid-line: nothing is drawn until a newline."""

    # Following a session ----------------------------------------------------------

    def watch(self, session: SessionState) -> Callable[[], None]:
        """Follow ``session`` and the child sessions it starts; returns the function ending it."""
        self._depth[session.session_id] = session.depth
        unsubscribe = self._rt.events.subscribe(self._on_event)
        unlisten = on_prompt(self._prompting)
        guarded: list[tuple[str, TextIO]] = []
        if self._live:
            # The view's own writes go to the real streams (its console is pinned to the
            # real stderr first); everyone else's pass through a guard.
            self._console.file = self._console.file
            for name in ("stdout", "stderr"):
                real = cast(TextIO, getattr(sys, name))
                guarded.append((name, real))
                setattr(sys, name, _Guarded(self, real))
            self._out = guarded[0][1]
            self._ticker = threading.Thread(target=self._tick, name="zuno-live", daemon=True)
            self._ticker.start()

        def stop() -> None:
            unsubscribe()
            unlisten()
            self._stop.set()
            if self._ticker is not None:
                self._ticker.join(timeout=2)
            with self._lock:
                self._follow_output(ending=True)
                self._clear()
                self._running.clear()
                for name, real in guarded:
                    setattr(sys, name, real)
                if self._mid_line:
                    self._out.write("\n")
                    self._out.flush()
                    self._mid_line = False

        return stop

    def text(self, piece: str) -> None:
        """A streamed piece of the top agent's text."""
        if not piece:
            return
        with self._lock:
            self._clear()
            self._out.write(piece)
            self._out.flush()
            self._mid_line = not piece.endswith("\n")

    # The bottom of the screen -----------------------------------------------------

    def _prompting(self, active: bool) -> None:
        with self._lock:
            if active:
                self._clear()
            else:
                self._foreign_mid = False  # the answer's Enter ended the prompt's line
            self._paused = active

    def _foreign(self, real: TextIO, text: str) -> int:
        """Someone else's write: the running calls step aside, then it is written."""
        with self._lock:
            if text:
                self._clear()
                if self._mid_line and real is not self._out:
                    self._out.write("\n")
                    self._out.flush()
                    self._mid_line = False
                self._foreign_mid = not text.endswith("\n")
            written = real.write(text)
            real.flush()
            return written

    def _clear(self) -> None:
        """Erase the running calls drawn at the bottom (the cursor is just below them)."""
        if self._drawn:
            self._console.file.write(f"\x1b[{self._drawn}F\x1b[J")
            self._console.file.flush()
            self._drawn = 0
            self._drawn_text = ""

    def _draw(self) -> None:
        """Redraw the running calls when what they show changed."""
        if (
            not self._live
            or self._paused
            or self._mid_line
            or self._foreign_mid
            or not self._running
        ):
            self._clear()
            return
        now = time.monotonic()
        width = max(20, self._console.width - 1)
        rows: list[Text] = []
        for running in list(self._running.values()):
            indent = "  " * running.depth
            row = Text(indent) + running.label
            row.append(f"  running {_elapsed(now - running.started)}", style="yellow")
            rows.append(row)
            shown = list(running.lines)
            pending = next((t.pending for t in running.tails if t.pending.strip()), "")
            if pending:
                shown = [*shown[-(_TAIL_LINES - 1) :], pending]
            rows += [Text(f"{indent}    {line}", style="dim") for line in shown]
        for row in rows:
            row.truncate(width, overflow="ellipsis")
            row.no_wrap = True
        with self._console.capture() as capture:
            for row in rows:
                self._console.print(row, no_wrap=True, overflow="ellipsis", crop=True)
        drawn = capture.get()
        if drawn == self._drawn_text:
            return
        self._clear()
        self._console.file.write(drawn)
        self._console.file.flush()
        self._drawn = len(rows)
        self._drawn_text = drawn

    def _tick(self) -> None:
        while not self._stop.wait(_TICK_S):
            with self._lock:
                self._follow_output()
                self._draw()

    def _follow_output(self, ending: bool = False) -> None:
        """Read what running commands printed; say so when a job has ended.

        Args:
            ending: The view is stopping: every job shown has ended or was cancelled.
        """
        try:
            jobs = set(self._rt.jobs.mine_running())
        except RuntimeError:  # the lane changed while it was read: next tick
            jobs = None
        for key, running in list(self._running.items()):
            for tail in running.tails:
                tail.poll(running.lines)
            if running.job_id is None or (not ending and (jobs is None or key in jobs)):
                continue
            del self._running[key]
            pending = [t.pending for t in running.tails if t.pending.strip()]
            took = _elapsed(time.monotonic() - running.started)
            self._line(running.depth, running.label + Text(f"  ended after {took}", style="dim"))
            for line in [*running.lines, *pending][-_TAIL_LINES:]:
                self._line(running.depth, Text(f"    {line}", style="dim"))

    # Lines ------------------------------------------------------------------------

    def _line(self, depth: int, text: Text, *, wrap: bool = False) -> None:
        """Print ``text`` indented by ``depth``; ``wrap``: broken between words at the
        screen's edge (the terminal would cut a word), continued under its indent."""
        with self._lock:
            self._clear()
            if self._mid_line:
                self._out.write("\n")
                self._out.flush()
                self._mid_line = False
            self._foreign_mid = False
            if wrap:
                from rich.padding import Padding

                self._console.print(Padding(text, (0, 0, 0, 2 * depth)), soft_wrap=False)
            else:
                self._console.print(Text("  " * depth) + text)
            self._draw()

    def _row(self, call_id: str | None) -> tuple[Any, ...] | None:
        if call_id is None:
            return None
        rows = self._rt.store.query(
            "SELECT tool, arguments, result, attempt, effect, replay, concurrency FROM calls"
            " WHERE call_id = ? ORDER BY attempt DESC LIMIT 1",
            (call_id,),
        )
        return rows[0] if rows else None

    def _on_event(self, event: Event) -> None:
        depth = self._depth.get(event.session_id)
        data = event.data
        if event.kind == "agent.started":
            depth = int(data.get("depth", 0))
            self._depth[event.session_id] = depth
            if depth > 0:
                self._line(
                    depth,
                    Text.assemble(
                        ("agent ", "dim"),
                        (str(data.get("agent")), "bold cyan"),
                        (f" started on {data.get('model')}  session {event.session_id}", "dim"),
                    ),
                )
            return
        if depth is None:
            return  # another session sharing this runtime
        handler = _HANDLERS.get(event.kind)
        if handler is not None:
            handler(self, depth, event)

    def _reply(self, depth: int, event: Event) -> None:
        if depth == 0:
            with self._lock:  # the reply is complete: its last line ends here
                if self._mid_line:
                    self._out.write("\n")
                    self._out.flush()
                    self._mid_line = False
                self._draw()
            return
        if event.data.get("text"):
            self._line(depth, Text(f"“{_first_line(str(event.data['text']))}”", style="italic"))

    def _arguments(self, raw: str) -> dict[str, Any]:
        try:
            values = json.loads(raw)
        except ValueError:
            return {}
        return cast(dict[str, Any], values) if isinstance(values, dict) else {}

    def _describe(self, tool: str, values: dict[str, Any]) -> str:
        implementation = self._rt.registry.get(tool)
        model = implementation.args_model if implementation is not None else None
        return describe_call(tool, values, model)

    def _started(self, depth: int, event: Event) -> None:
        row = self._row(event.call_id)
        if row is None or event.call_id is None:
            return
        tool, arguments, _result, attempt, *declaration = row
        values = self._arguments(str(arguments))
        self._before[event.call_id] = self._snapshot(str(tool), values)
        described = self._describe(str(tool), values)
        if described.startswith(f"{tool} "):
            described = described[len(tool) + 1 :]
        label = Text.assemble(
            ("▸ ", "cyan"),
            (str(tool), "bold"),
            (" [" + "/".join(str(d or "-") for d in declaration) + "] ", "dim"),
            (described, ""),
        )
        if attempt > 1:
            label.append(f" (attempt {attempt})", style="dim")
        if not self._live:
            self._line(depth, label)  # on a terminal it shows at the bottom while it runs
        running = _Running(depth, label, time.monotonic())
        if tool in ("shell", "execute") and not values.get("background"):
            running.tails = [
                OutputTail(self._rt.artifacts.path_for(event.session_id, event.call_id, name))
                for name in ("stdout", "stderr")
            ]
        elif tool in ("exec_command", "write_stdin", "exec_poll"):
            running.tails = self._process_tail(event.session_id, event.call_id, tool, values)
        with self._lock:
            self._running[event.call_id] = running
            self._draw()

    def _process_tail(
        self, session_id: str, call_id: str, tool: str, values: dict[str, Any]
    ) -> list[OutputTail]:
        """The transcript of the interactive process a call starts or talks to, from its end."""
        started_by = call_id
        if tool != "exec_command":
            rows = self._rt.store.query(
                "SELECT call_id FROM exec_processes WHERE session_id = ? AND number = ?",
                (session_id, values.get("session")),
            )
            if not rows:
                return []
            started_by = str(rows[0][0])
        path = self._rt.artifacts.path_for(session_id, started_by, "transcript")
        try:
            offset = os.path.getsize(path) if tool != "exec_command" else 0
        except OSError:
            offset = 0
        return [OutputTail(path, offset)]

    def _asking(self, depth: int, event: Event) -> None:
        if event.call_id is not None:
            self._asked.add(event.call_id)

    def _finished(self, depth: int, event: Event) -> None:
        call_id = event.call_id or ""
        with self._lock:
            running = self._running.pop(call_id, None)
        row = self._row(event.call_id)
        if running is not None and self._live:
            self._line(depth, running.label)
        outcome = str(event.data.get("outcome"))
        tool = str(event.data.get("tool"))
        output = for_person(str(row[2] or "")) if row else ""
        lines = result_lines(tool, output) if row else []
        if tool == "read" and row is not None and outcome == "ok":
            # The path and the lines read, not the first line of the file.
            shown = read_range(output)
            path = self._arguments(str(row[1])).get("path", "?")
            lines = [f"{path}: {shown}" if shown else f"{path}: {lines[0] if lines else ''}"]
        seconds = time.monotonic() - running.started if running else 0.0
        took = f" ({_elapsed(seconds)})" if seconds >= 1 else ""
        self._line(
            depth,
            Text.assemble(
                ("  ", ""),
                (outcome, outcome_style(outcome)),
                (f" {tool}", "bold"),
                (f"  {lines[0]}" if lines else "", "dim"),
                (took, "dim"),
            ),
        )
        for line in lines[1:]:
            self._line(depth, Text(f"    {line}", style="dim"))
        before = self._before.pop(call_id, None)
        if before and outcome == "ok" and call_id not in self._asked:
            self._show_diff(depth, before)  # once: an approval prompt already showed it
        self._asked.discard(call_id)
        if outcome == "ok" and tool == "shell" and row is not None:
            self._follow_job(depth, call_id)

    def _snapshot(self, tool: str, values: dict[str, Any]) -> dict[str, str | None]:
        """The files a writing call may change, as they are before it runs."""
        implementation = self._rt.registry.get(tool)
        if implementation is None or not implementation.writes_files:
            return {}
        try:
            args = implementation.args_model.model_validate(values)
            paths = implementation.touched_paths(args)
        except Exception:  # a call that cannot be read has nothing to compare
            return {}
        before: dict[str, str | None] = {}
        for path in paths[:20]:
            known, text = self._read(path)
            if known:
                before[path] = text
        return before

    def _read(self, raw: str) -> tuple[bool, str | None]:
        """Whether the file's content can be shown, and that content (None: no such file)."""
        target = (self._rt.workspace / os.path.expanduser(raw)).resolve()
        if not target.is_relative_to(self._rt.workspace):
            return False, None  # outside the workspace: never shown
        try:
            if target.stat().st_size > _SNAPSHOT_MAX:
                return False, None
            return True, target.read_text("utf-8", "replace")
        except FileNotFoundError:
            return True, None
        except OSError:
            return False, None

    def _show_diff(self, depth: int, before: dict[str, str | None]) -> None:
        lines: list[str] = []
        for path, old in before.items():
            known, new = self._read(path)
            if known:
                lines += file_diff(path, old, new)
        if not lines:
            return
        more = len(lines) - _DIFF_LINES
        text = styled_diff(lines[:_DIFF_LINES], indent="  " * depth + "    ")
        if more > 0:
            text.append(f"\n{'  ' * depth}    … {more} more diff lines", style="dim")
        self._line(0, text)

    def _follow_job(self, depth: int, call_id: str) -> None:
        rows = self._rt.store.query(
            "SELECT job_id, description, output_path FROM jobs WHERE call_id = ?", (call_id,)
        )
        if not rows:
            return
        job_id, description, output_path = rows[0]
        label = Text.assemble(
            ("◦ job ", "cyan"), (str(job_id), "bold"), (f" $ {_first_line(str(description))}", "")
        )
        with self._lock:
            self._running[str(job_id)] = _Running(
                depth,
                label,
                time.monotonic(),
                [OutputTail(Path(str(output_path)))],
                job_id=str(job_id),
            )
            self._draw()

    def _blocked(self, depth: int, event: Event) -> None:
        data = event.data
        reason = " ".join(for_person(str(data.get("reason", ""))).split())
        self._line(
            depth,
            Text.assemble(
                ("⊘ ", "yellow"),
                (str(data.get("tool")), "bold"),
                (f" blocked: {data.get('block_kind')}", "yellow"),
                (f"  {reason}", "dim"),
            ),
            wrap=True,
        )

    def _decided(self, depth: int, event: Event) -> None:
        decision = str(event.data.get("decision"))
        style = "red" if decision == "deny" else "green"
        said = str(event.data.get("message") or "")
        rule: Any = event.data.get("rule")
        extra = f" (the model is told: {said})" if said else ""
        if isinstance(rule, dict):
            kept = cast(dict[str, Any], rule)
            extra = f" (rule kept: {kept.get('action')} {kept.get('tool')} {kept.get('pattern')!r})"
        self._line(
            depth,
            Text.assemble(
                ("  approval for ", "dim"),
                (str(event.data.get("tool")), "bold"),
                (": ", "dim"),
                (decision, style),
                (extra, "dim"),
            ),
            wrap=True,
        )

    def _mode(self, depth: int, event: Event) -> None:
        mode = str(event.data.get("mode"))
        self._line(
            depth,
            Text.assemble(
                ("  permission mode: ", "dim"),
                (mode, "bold"),
                (f" (was {event.data.get('was')}){_MODE_NOTES.get(mode, '')}", "dim"),
            ),
        )

    def _retry(self, depth: int, event: Event) -> None:
        self._line(depth, Text(f"  retrying (attempt {event.data.get('attempt')})", style="dim"))

    def _child_finished(self, depth: int, event: Event) -> None:
        if depth == 0:
            return
        status = str(event.data.get("status"))
        style = "green" if status == TurnStatus.ANSWERED.value else "red"
        self._line(
            depth,
            Text.assemble(
                ("agent finished: ", "dim"),
                (status, style),
                (f" after {event.data.get('steps')} steps  session {event.session_id}", "dim"),
            ),
        )


_HANDLERS: dict[str, Callable[[LiveView, int, Event], None]] = {
    "agent.reply": LiveView._reply,  # pyright: ignore[reportPrivateUsage]
    "call.started": LiveView._started,  # pyright: ignore[reportPrivateUsage]
    "call.finished": LiveView._finished,  # pyright: ignore[reportPrivateUsage]
    "dispatch.blocked": LiveView._blocked,  # pyright: ignore[reportPrivateUsage]
    "approval.requested": LiveView._asking,  # pyright: ignore[reportPrivateUsage]
    "approval.decided": LiveView._decided,  # pyright: ignore[reportPrivateUsage]
    "call.retry": LiveView._retry,  # pyright: ignore[reportPrivateUsage]
    "session.mode": LiveView._mode,  # pyright: ignore[reportPrivateUsage]
    "agent.finished": LiveView._child_finished,  # pyright: ignore[reportPrivateUsage]
}
