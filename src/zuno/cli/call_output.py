"""A direct call's command as it runs: what ``zuno call`` and ``zuno batch`` show meanwhile.

Both ways write to stderr, so stdout keeps only the result (printed at the end,
bounded as before):

* :class:`RawStream` (``--stream``, on a pipe or a terminal): every byte the
  command prints, stdout and stderr alike, as the reader takes it from the
  command's pipes (see :attr:`zuno.contract.tool.ToolContext.output_tap`). A writer
  thread of its own copies it out, so a slow reader of stderr slows the
  command (as a pipe would) but never holds it past its deadline: when stderr
  is not read for a few seconds, what comes meanwhile is left out and a last
  line says how much. The result and the artifacts have everything.
* :class:`RunningTail` (a terminal, without ``--stream``): the live view's
  bottom lines for a running ``shell`` or ``execute`` call, its command, how
  long it has run and its last lines, followed from the artifacts the output
  already goes to (see :class:`~zuno.cli.output_tail.OutputTail`) and erased
  when the call ends.

A command server's child writes to the caller's own descriptors, so both work
the same whether the command is served or not.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from zuno.cli.output_tail import OutputTail
from zuno.contract.output import format_size

if TYPE_CHECKING:
    from zuno.contract.events import Event
    from zuno.dispatch.dispatcher import CallRequest
    from zuno.session.runtime import Runtime

__all__ = ["RawStream", "RunningTail", "follow_calls"]

_BACKLOG = 8 * 1024 * 1024
"""Bytes read from the command but not yet written out before the reader waits."""
_STALL_S = 5.0
"""A write to stderr blocked this long: its reader has stopped reading."""
_TICK_S = 0.25
"""How often the running command's lines may be redrawn."""
_TAIL_LINES = 5
_COMMAND_TOOLS = ("shell", "execute")


class RawStream:
    """Copies a command's output to a descriptor as it comes, from a thread of its own."""

    def __init__(self, fd: int, *, backlog: int = _BACKLOG, stall_s: float = _STALL_S) -> None:
        """Start the writer thread for ``fd`` (stderr's, for ``--stream``)."""
        self._fd = fd
        self._backlog = backlog
        self._stall_s = stall_s
        self._ready = threading.Condition()
        self._pending: deque[bytes] = deque()
        self._size = 0
        self._busy_since: float | None = None
        self._closing = False
        self._broken = False
        self.dropped = 0
        """Bytes left out because stderr was not read."""
        self._thread = threading.Thread(target=self._write_all, name="zuno-stream", daemon=True)
        self._thread.start()

    def tap(self, name: str, data: bytes) -> None:
        """Take a chunk of the command's output (called in the command's reading thread)."""
        with self._ready:
            while not self._broken and self._size and self._size + len(data) > self._backlog:
                busy = self._busy_since
                if busy is not None and time.monotonic() - busy > self._stall_s:
                    self.dropped += len(data)
                    return
                self._ready.wait(0.1)
            if self._broken:
                return
            self._pending.append(data)
            self._size += len(data)
            self._ready.notify_all()

    def close(self) -> None:
        """Write out what is pending (unless stderr stalled), then say what was left out."""
        with self._ready:
            self._closing = True
            self._ready.notify_all()
        self._thread.join(self._stall_s)
        if self._thread.is_alive():  # stderr is not being read: the rest stays unwritten
            with self._ready:
                self.dropped += self._size
        if self.dropped and not self._broken and not self._thread.is_alive():
            self._write(
                f"\nzuno: {format_size(self.dropped)} of the command's output were not "
                f"streamed: stderr was not read for {self._stall_s:g} s (the result and its "
                "artifacts have all of it)\n".encode()
            )

    def _write_all(self) -> None:
        while True:
            with self._ready:
                while not self._pending and not self._closing:
                    self._ready.wait()
                if not self._pending:
                    return
                chunk = self._pending.popleft()
                self._busy_since = time.monotonic()
            written = self._write(chunk)
            with self._ready:
                self._busy_since = None
                self._size -= len(chunk)
                if not written:
                    self._broken = True
                    self._pending.clear()
                    self._size = 0
                self._ready.notify_all()
                if self._broken:
                    return

    def _write(self, data: bytes) -> bool:
        """Write all of data; False when the descriptor is gone (its reader closed it)."""
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:  # EPIPE (`zuno call ... 2>&1 | head`), or closed
            return False
        return True


@dataclass
class _Shown:
    """A running command at the bottom of the terminal."""

    label: str
    started: float
    tails: list[OutputTail]
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=_TAIL_LINES))


class RunningTail:
    """The last lines of the running ``shell`` and ``execute`` calls, at the terminal's bottom."""

    def __init__(self, rt: Runtime, requests: Sequence[CallRequest]) -> None:
        """Follow the calls ``requests`` start on ``rt`` (call :meth:`start`)."""
        self._rt = rt
        self._requests = list(requests)
        self._lock = threading.Lock()
        self._shown: dict[str, _Shown] = {}
        self._drawn = 0
        self._drawn_text = ""
        self._stop = threading.Event()
        self._out = sys.stderr
        self._thread = threading.Thread(target=self._tick, name="zuno-tail", daemon=True)

    def start(self) -> Callable[[], None]:
        """Begin following; returns the function that ends it (and erases what it drew)."""
        unsubscribe = self._rt.events.subscribe(self._on_event)
        self._thread.start()

        def stop() -> None:
            unsubscribe()
            self._stop.set()
            self._thread.join(timeout=2)
            with self._lock:
                self._shown.clear()
                self._clear()

        return stop

    def _on_event(self, event: Event) -> None:
        if event.call_id is None:
            return
        if event.kind == "call.finished":
            with self._lock:
                if self._shown.pop(event.call_id, None) is not None:
                    self._draw()
            return
        if event.kind != "call.started" or event.data.get("tool") not in _COMMAND_TOOLS:
            return
        tool = str(event.data["tool"])
        values = self._arguments(event.data.get("index"))
        if values.get("background"):
            return  # a job: its result says how to follow it
        label = self._describe(tool, values)
        tails = [
            OutputTail(self._rt.artifacts.path_for(event.session_id, event.call_id, name))
            for name in ("stdout", "stderr")
        ]
        with self._lock:
            self._shown[event.call_id] = _Shown(label, time.monotonic(), tails)
            self._draw()

    def _arguments(self, index: object) -> dict[str, Any]:
        if not isinstance(index, int) or not 0 <= index < len(self._requests):
            return {}
        given: Any = self._requests[index].arguments
        if isinstance(given, str):
            try:
                given = json.loads(given)
            except ValueError:
                return {}
        return cast(dict[str, Any], given) if isinstance(given, dict) else {}

    def _describe(self, tool: str, values: dict[str, Any]) -> str:
        from zuno.contract.call_text import describe_call

        found = self._rt.registry.get(tool)
        return describe_call(tool, values, found.args_model if found is not None else None)

    def _tick(self) -> None:
        while not self._stop.wait(_TICK_S):
            with self._lock:
                for shown in self._shown.values():
                    for tail in shown.tails:
                        tail.poll(shown.lines)
                self._draw()

    def _draw(self) -> None:
        """Redraw the running commands when what they show changed."""
        width = max(20, shutil.get_terminal_size().columns - 1)
        now = time.monotonic()
        rows: list[str] = []
        for shown in self._shown.values():
            seconds = int(now - shown.started)
            rows.append(f"{_cut(shown.label, width - 14)}  \x1b[33mrunning {seconds}s\x1b[0m")
            lines = list(shown.lines)
            pending = next((t.pending for t in shown.tails if t.pending.strip()), "")
            if pending:
                lines = [*lines[-(_TAIL_LINES - 1) :], pending]
            rows += [f"\x1b[2m    {_cut(line, width - 4)}\x1b[0m" for line in lines]
        text = "".join(row + "\n" for row in rows)
        if text == self._drawn_text:
            return
        self._clear()
        self._write(text)
        self._drawn, self._drawn_text = len(rows), text

    def _clear(self) -> None:
        """Erase what was drawn (the cursor is just below it)."""
        if self._drawn:
            self._write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn, self._drawn_text = 0, ""

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # a terminal gone: nothing to show
            self._out.write(text)
            self._out.flush()


def _cut(text: str, width: int) -> str:
    """One line of at most ``width`` characters, control characters made visible."""
    line = "".join(c if c.isprintable() else "?" for c in text.replace("\t", "    "))
    width = max(4, width)
    return line if len(line) <= width else line[: width - 1] + "…"


def follow_calls(
    rt: Runtime, requests: Sequence[CallRequest], *, stream: bool
) -> Callable[[], None]:
    """Show the commands ``requests`` run while they run; returns the function ending it.

    With ``stream``, their raw output goes to stderr as it comes (:class:`RawStream`);
    else, when stderr is a terminal, their last lines show at its bottom
    (:class:`RunningTail`); else nothing is shown until the result.
    """
    if stream:
        sys.stderr.flush()
        raw = RawStream(sys.stderr.fileno())
        rt.output_tap = raw.tap

        def end_stream() -> None:
            rt.output_tap = None
            raw.close()

        return end_stream
    if not _terminal(sys.stderr) or not any(r.tool in _COMMAND_TOOLS for r in requests):
        return lambda: None
    return RunningTail(rt, requests).start()


def _terminal(stream: Any) -> bool:
    if os.environ.get("TERM", "") in ("", "dumb"):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
