"""A session's transcript as a person reads it (``zuno show``), rebuilt from the store.

The conversation (``messages``) gives the prompts, each model step's text and
the calls the step asked for; the call rows and ``dispatch.started`` events
give what each call did (or that it never started); the recovery tables give
every notice, the ones already given as well as the one the next turn gets.

A step's calls are found through the results stored after it (each names its
dispatch step); a step whose results were never stored (the run was killed)
is matched to the next dispatch step whose calls carry its call ids or tool
names. Dispatch steps no model step asked for are direct calls (``zuno call
--session``) and are shown where they happened.

The final answer is the last message of the conversation when it is a model
reply without tool calls: the loop stores a reply only once it is complete,
and a reply without calls is what ends a turn. Text beside tool calls is a
step's text, never an answer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from zuno.cli.not_run import NotRun, calls_not_run
from zuno.durability.recovery import RecoveryNotice
from zuno.durability.store import Store
from zuno.durability.store.records import CallRecord, EventRecord, SessionRecord, iso
from zuno.execution.sandbox.egress.ledger import LEDGER_EVENTS
from zuno.policy.budget import SessionUsage, session_usage, usage_from_events

__all__ = [
    "GivenNotice",
    "LateResult",
    "Said",
    "Step",
    "Transcript",
    "build_transcript",
    "moved_note",
]

# The loop keeps its bookkeeping beside each stored message under this key.
_META = "zuno"


def moved_note(old: str, new: str) -> str:
    """What the model (and the transcript) is told when a resumed session changes folder."""
    return (
        f"Note from Zuno: this session now continues in {new} (it worked in {old} until now). "
        f"Relative paths and commands now start in {new}; files and processes you saw in "
        f"{old} are not there unless they were copied, so look before relying on them."
    )


@dataclass(frozen=True, slots=True)
class Said:
    """A user message: a prompt, a later instruction, or a recovery notice given to the model."""

    text: str
    recovery_attempt: int | None = None
    """Set when the message is the recovery notice of this attempt."""
    compaction: int | None = None
    """Set when the message is the summary of this compaction (:mod:`zuno.agent.compaction`)."""

    def as_dict(self) -> dict[str, Any]:
        kind = "recovery_notice" if self.recovery_attempt is not None else "user"
        if self.compaction is not None:
            kind = "compaction_summary"
        return {"kind": kind, "text": self.text, "recovery_attempt": self.recovery_attempt}


@dataclass(frozen=True, slots=True)
class Step:
    """One model step (its text and the calls it asked for), or a step of direct calls."""

    number: int | None
    """The model step (1, 2, ...); None for calls made directly (``zuno call --session``)."""
    dispatch_step: int | None
    """The dispatcher's step number of its calls; None when they were never dispatched."""
    text: str = ""
    asked: tuple[tuple[str, str], ...] = ()
    """The calls the model asked for: (tool, arguments)."""
    calls: tuple[CallRecord, ...] = ()
    not_run: tuple[NotRun, ...] = ()
    undispatched: bool = False
    """The run stopped after the reply was stored and before its calls were dispatched."""

    @property
    def is_answer(self) -> bool:
        """A model reply that asked for no tool: it ended its turn."""
        return self.number is not None and not self.asked

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": "step" if self.number is not None else "direct_calls",
            "step": self.number,
            "dispatch_step": self.dispatch_step,
            "text": self.text,
            "asked": [{"tool": t, "arguments": a} for t, a in self.asked],
            "calls": [c.as_dict() for c in self.calls],
            "not_run": [n.as_dict() for n in self.not_run],
            "undispatched": self.undispatched,
        }


@dataclass(frozen=True, slots=True)
class GivenNotice:
    """A recovery notice a turn received (a row of ``recovery_notices``)."""

    attempt: int
    created_at: float
    call_ids: tuple[str, ...]
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "created_at": iso(self.created_at),
            "call_ids": list(self.call_ids),
            "text": self.text,
        }


LATE_KINDS = ("call.late_result", "job.late_result")
"""Events of a result that came after its row was settled otherwise (kept beside the row)."""


@dataclass(frozen=True, slots=True)
class LateResult:
    """A result that arrived after its call was settled (``call.late_result``), or a
    background job's end after it was marked lost (``job.late_result``).

    The settled row stays as it was; this is what its owner reported afterwards.
    """

    kind: str
    call_id: str
    at: float
    data: dict[str, Any]

    def belongs_to(self, call: CallRecord) -> bool:
        """Whether it is shown beside ``call`` (its call and, when named, its attempt)."""
        attempt = self.data.get("attempt")
        return self.call_id == call.call_id and (attempt is None or attempt == call.attempt)

    def as_dict(self) -> dict[str, Any]:
        return {**self.data, "kind": self.kind, "call_id": self.call_id, "at": iso(self.at)}


@dataclass(frozen=True, slots=True)
class Transcript:
    """Everything ``zuno show`` prints about one session."""

    session: SessionRecord
    entries: tuple[Said | Step, ...]
    models: tuple[str, ...]
    """The model of each turn, in order, without repeats (else the session's own)."""
    final_answer: str | None
    ending: str | None
    """Why there is no final answer, for a session with a conversation; else None."""
    given: tuple[GivenNotice, ...]
    pending: RecoveryNotice | None
    children: tuple[SessionRecord, ...] = ()
    not_run: tuple[NotRun, ...] = field(default=())
    late: tuple[LateResult, ...] = ()
    """Late results, in the order they arrived (``zuno show`` prints them beside their call)."""
    usage: SessionUsage = field(default_factory=SessionUsage)
    """Tokens and cost of this session's own model replies (:mod:`zuno.policy.budget`)."""
    children_usage: SessionUsage = field(default_factory=SessionUsage)
    """The same for its child agents' sessions, theirs included."""
    instructions: tuple[str, ...] = ()
    """The project instruction files (``AGENTS.md``) its turns were given, in prompt order."""
    egress: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=lambda: {})
    """The egress ledger of each call attempt run in proxy network mode, by
    (call id, attempt): one row per connection (:mod:`zuno.execution.sandbox.egress.ledger`)."""

    @property
    def prompt(self) -> str | None:
        """The first thing the user asked, if the session has a conversation."""
        return next(
            (
                e.text
                for e in self.entries
                if isinstance(e, Said) and e.recovery_attempt is None and e.compaction is None
            ),
            None,
        )

    @property
    def steps(self) -> list[Step]:
        return [e for e in self.entries if isinstance(e, Step)]


def build_transcript(
    store: Store,
    session: SessionRecord,
    *,
    calls: Sequence[CallRecord],
    events: Sequence[EventRecord],
    pending: RecoveryNotice | None,
) -> Transcript:
    """The transcript of ``session`` from its rows (the caller has settled what it may)."""
    not_run = calls_not_run(events, calls)
    dispatch = _DispatchSteps(calls, events, not_run)
    entries: list[Said | Step] = []
    stored = [_split(body) for _role, body in store.messages(session.session_id)]
    for position, (body, meta) in enumerate(stored):
        role = body.get("role")
        if role == "user":
            attempt = meta.get("recovery_attempt")
            number = meta.get("compaction")
            entries.append(
                Said(
                    str(body.get("text", "")),
                    int(attempt) if attempt else None,
                    int(number) if number else None,
                )
            )
        elif role == "assistant":
            asked = tuple(
                (str(c.get("name", "")), str(c.get("arguments", "")))
                for c in body.get("tool_calls") or ()
            )
            ids = [str(c.get("id", "")) for c in body.get("tool_calls") or ()]
            number = meta.get("step")
            claimed = dispatch.claim(_result_step(stored, position), ids, [t for t, _ in asked])
            if claimed is not None:
                entries.extend(dispatch.direct_before(claimed))
            entries.append(
                Step(
                    int(number) if number is not None else None,
                    claimed,
                    str(body.get("text", "")),
                    asked,
                    dispatch.calls(claimed),
                    dispatch.not_run(claimed),
                    undispatched=bool(asked) and claimed is None,
                )
            )
    entries.extend(dispatch.direct_before(None))
    children = tuple(store.child_sessions(session.session_id))
    children_usage = SessionUsage()
    for child in children:
        children_usage = children_usage + session_usage(store, child.session_id)
    last = stored[-1][0] if stored else None
    final = None
    if last is not None and last.get("role") == "assistant" and not last.get("tool_calls"):
        final = str(last.get("text", ""))
    return Transcript(
        session,
        tuple(entries),
        _models(session, events),
        final,
        None if final is not None or not stored else _ending(session.session_id, events),
        _given(store, session.session_id),
        pending,
        children,
        tuple(not_run),
        tuple(
            LateResult(e.kind, e.call_id or "", e.at, dict(e.data))
            for e in events
            if e.kind in LATE_KINDS and e.call_id
        ),
        usage_from_events((e.kind, e.data) for e in events),
        children_usage,
        _instructions(events),
        _egress(events),
    )


def _egress(events: Sequence[EventRecord]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The ledger rows of each call attempt (a background job's join its starting call's)."""
    found: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for e in events:
        if e.kind in LEDGER_EVENTS and e.call_id and isinstance(e.data.get("egress"), list):
            key = (e.call_id, int(e.data.get("attempt") or 1))
            found.setdefault(key, []).extend(e.data["egress"])
    return found


def _split(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    meta: Any = body.pop(_META, None)
    return body, cast(dict[str, Any], meta) if isinstance(meta, dict) else {}


def _result_step(stored: list[tuple[dict[str, Any], dict[str, Any]]], position: int) -> int | None:
    """The dispatch step named by the results stored right after a model reply."""
    for body, meta in stored[position + 1 :]:
        if body.get("role") != "tool":
            return None
        step = meta.get("dispatch_step")
        if isinstance(step, int) and step > 0:
            return step
    return None


class _DispatchSteps:
    """The dispatcher's steps of a session, handed out to model steps in order."""

    def __init__(
        self, calls: Sequence[CallRecord], events: Sequence[EventRecord], not_run: list[NotRun]
    ) -> None:
        self._calls: dict[int, list[CallRecord]] = {}
        for call in calls:
            self._calls.setdefault(call.step, []).append(call)
        self._not_run: dict[int, list[NotRun]] = {}
        for item in not_run:
            self._not_run.setdefault(item.step, []).append(item)
        self._planned: dict[int, list[str]] = {}
        for event in events:
            step = event.data.get("step")
            if event.kind == "dispatch.started" and isinstance(step, int):
                requests: list[Any] = event.data.get("requests") or []
                self._planned[step] = [str(r.get("tool", "")) for r in requests]
        self._order = sorted({*self._calls, *self._planned})
        self._claimed: set[int] = set()
        self._shown: set[int] = set()
        self._last = 0

    def claim(self, named: int | None, ids: list[str], tools: list[str]) -> int | None:
        """The dispatch step of a model step: named by its results, else the next that fits."""
        if not ids:
            return None
        if named is None:
            later = (s for s in self._order if s > self._last)
            named = next((s for s in later if self._fits(s, ids, tools)), None)
        if named is not None:
            self._claimed.add(named)
            self._last = max(self._last, named)
        return named

    def _fits(self, step: int, ids: list[str], tools: list[str]) -> bool:
        if step in self._claimed:
            return False
        rows = self._calls.get(step, [])
        if rows and all(r.model_call_id in ids for r in rows):
            return True
        return self._planned.get(step) == tools

    def direct_before(self, step: int | None) -> list[Step]:
        """The unclaimed (direct) steps before ``step`` (None: all that remain), once each."""
        out: list[Step] = []
        for s in self._order:
            if step is not None and s >= step:
                break
            if s in self._claimed or s in self._shown:
                continue
            self._shown.add(s)
            out.append(Step(None, s, calls=self.calls(s), not_run=self.not_run(s)))
        return out

    def calls(self, step: int | None) -> tuple[CallRecord, ...]:
        if step is None:
            return ()
        return tuple(sorted(self._calls.get(step, []), key=lambda c: (c.index, c.attempt)))

    def not_run(self, step: int | None) -> tuple[NotRun, ...]:
        return tuple(self._not_run.get(step, [])) if step is not None else ()


def _models(session: SessionRecord, events: Sequence[EventRecord]) -> tuple[str, ...]:
    seen = [
        str(e.data["model"]) for e in events if e.kind == "agent.started" and e.data.get("model")
    ]
    if session.model:
        seen.insert(0, session.model)
    return tuple(dict.fromkeys(seen))


def _instructions(events: Sequence[EventRecord]) -> tuple[str, ...]:
    """The instruction files of the session's turns, each once, in the order first given."""
    paths: dict[str, None] = {}
    for event in events:
        if event.kind == "agent.started":
            for path in event.data.get("instructions") or ():
                paths.setdefault(str(path), None)
    return tuple(paths)


def _ending(session_id: str, events: Sequence[EventRecord]) -> str:
    """Why a session with a conversation has no final answer, from its turn events."""
    started = [e for e in events if e.kind == "agent.started"]
    finished = [e for e in events if e.kind == "agent.finished"]
    resume = f"`zuno resume {session_id}` continues it"
    if started and (not finished or finished[-1].seq < started[-1].seq):
        return (
            "no final answer: the last turn did not finish (it is still running, or its "
            f"process was stopped); {resume}"
        )
    if finished:
        data = finished[-1].data
        why = str(data.get("message") or data.get("status") or "it stopped")
        return f"no final answer: {why}; {resume}"
    return f"no final answer: no turn has run yet; {resume}"


def _given(store: Store, session_id: str) -> tuple[GivenNotice, ...]:
    """Every recovery notice given in the session (none in a store without the table)."""
    if not store.has_table("recovery_notices"):
        return ()
    rows = store.query(
        "SELECT attempt, created_at, call_ids, text FROM recovery_notices"
        " WHERE session_id = ? ORDER BY attempt",
        (session_id,),
    )
    return tuple(
        GivenNotice(int(attempt), float(created), tuple(json.loads(ids)), str(text))
        for attempt, created, ids, text in rows
    )
