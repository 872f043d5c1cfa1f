"""Durable work state: a plan, a todo list and a goal per session, kept in SQL.

``plan_get`` / ``plan_update``, ``todo_get`` / ``todo_update`` and ``goal_get`` /
``goal_update`` let an agent keep its working state in the store rather than
in transcript prose, so a resumed session or a recovery turn reads the same
state a person sees.

The getters only read (ReadOnly / Safe / ParallelSafe). The updates change
durable state, so they keep the strict defaults (SideEffecting / Never /
Exclusive): strict mode asks before each one unless a permission rule allows
it, and an update is never replayed by the runtime.

Each family has its own tables, created on first use (see :class:`WorkState`).
"""

from __future__ import annotations

import json
import sqlite3
import time
import weakref
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from zuno.declarations import Concurrency, Declaration, Effect, Replay
from zuno.store import Store
from zuno.tool import ArgumentsRejected, Tool, ToolArgs, ToolContext, ToolError, ToolResult

__all__ = [
    "MAX_CRITERIA",
    "MAX_PLAN_CHARS",
    "MAX_TODOS",
    "MAX_TODO_CHARS",
    "STATE_SCHEMA",
    "Goal",
    "GoalGetTool",
    "GoalStatus",
    "GoalUpdateArgs",
    "GoalUpdateTool",
    "NoArgs",
    "Plan",
    "PlanGetTool",
    "PlanUpdateArgs",
    "PlanUpdateTool",
    "Todo",
    "TodoChange",
    "TodoGetTool",
    "TodoItem",
    "TodoStatus",
    "TodoUpdateArgs",
    "TodoUpdateTool",
    "WorkState",
    "WorkStateError",
    "state_tools",
]

MAX_PLAN_CHARS = 20_000
MAX_TODOS = 100
MAX_TODO_CHARS = 500
MAX_OBJECTIVE_CHARS = 2_000
MAX_CRITERIA = 20
MAX_CRITERION_CHARS = 500

TodoStatus = Literal["pending", "in_progress", "completed", "cancelled"]
GoalStatus = Literal["active", "achieved", "abandoned"]

Criterion = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_CRITERION_CHARS)
]
TodoText = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TODO_CHARS),
    # One line per item keeps the rendered list one item per line.
    AfterValidator(lambda text: " ".join(text.split())),
]
Objective = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_OBJECTIVE_CHARS)
]
# Blank text is refused by stripping before the length check.

_TODO_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$"
_INSPECTION = Declaration(Effect.READ_ONLY, Replay.SAFE, Concurrency.PARALLEL_SAFE)

STATE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS work_plans ("
    " session_id TEXT PRIMARY KEY, plan TEXT NOT NULL, revision INTEGER NOT NULL,"
    " updated_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS work_todo_lists ("
    " session_id TEXT PRIMARY KEY, next_id INTEGER NOT NULL, revision INTEGER NOT NULL,"
    " updated_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS work_todos ("
    " session_id TEXT NOT NULL, todo_id TEXT NOT NULL, position INTEGER NOT NULL,"
    " content TEXT NOT NULL, status TEXT NOT NULL, updated_at REAL NOT NULL,"
    " PRIMARY KEY (session_id, todo_id))",
    "CREATE TABLE IF NOT EXISTS work_goals ("
    " session_id TEXT PRIMARY KEY, objective TEXT NOT NULL, status TEXT NOT NULL,"
    " criteria TEXT NOT NULL, revision INTEGER NOT NULL, updated_at REAL NOT NULL)",
)
"""The tables of the work state (one row or list per session)."""


class WorkStateError(ArgumentsRejected):
    """An update that does not fit the stored state (an unknown todo id)."""


# --- records -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """A session's plan: free text, replaced whole by each update."""

    text: str
    revision: int
    updated_at: float


@dataclass(frozen=True, slots=True)
class Todo:
    """One todo item; ``order`` is its 1-based place in the list."""

    todo_id: str
    content: str
    status: TodoStatus
    order: int

    def as_dict(self) -> dict[str, Any]:
        """The item as JSON-ready data."""
        return {
            "id": self.todo_id,
            "content": self.content,
            "status": self.status,
            "order": self.order,
        }


@dataclass(frozen=True, slots=True)
class Goal:
    """A session's objective, its status and what would show it is achieved."""

    objective: str
    status: GoalStatus
    criteria: tuple[str, ...]
    revision: int
    updated_at: float

    def as_dict(self) -> dict[str, Any]:
        """The goal as JSON-ready data."""
        return {
            "objective": self.objective,
            "status": self.status,
            "criteria": list(self.criteria),
            "revision": self.revision,
        }


# --- storage ---------------------------------------------------------------------

_ready: weakref.WeakSet[Store] = weakref.WeakSet()


class WorkState:
    """The plan, todos and goal of sessions, in one store.

    Args:
        store: The runtime's store; the tables are created on first use.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        if store not in _ready:
            store.ensure_schema(STATE_SCHEMA)
            _ready.add(store)

    # Plan -----------------------------------------------------------------------

    def plan(self, session_id: str) -> Plan | None:
        """The session's plan, or None before the first update."""
        rows = self.store.query(
            "SELECT plan, revision, updated_at FROM work_plans WHERE session_id = ?",
            (session_id,),
        )
        return Plan(rows[0][0], rows[0][1], rows[0][2]) if rows else None

    def set_plan(self, session_id: str, text: str) -> Plan:
        """Replace the session's plan (an empty text clears it)."""
        now = time.time()
        with self.store.transaction() as db:
            row = db.execute(
                "INSERT INTO work_plans (session_id, plan, revision, updated_at)"
                " VALUES (?, ?, 1, ?) ON CONFLICT (session_id) DO UPDATE SET"
                " plan = excluded.plan, revision = revision + 1, updated_at = excluded.updated_at"
                " RETURNING revision",
                (session_id, text, now),
            ).fetchone()
        return Plan(text, int(row[0]), now)

    # Todos ----------------------------------------------------------------------

    def todos(self, session_id: str) -> list[Todo]:
        """The session's todos, in order."""
        rows = self.store.query(
            "SELECT todo_id, content, status FROM work_todos WHERE session_id = ?"
            " ORDER BY position",
            (session_id,),
        )
        return [Todo(r[0], r[1], r[2], i) for i, r in enumerate(rows, 1)]

    def replace_todos(self, session_id: str, items: list[TodoItem]) -> list[Todo]:
        """Make ``items`` the whole list, in that order; items without an id get a new one."""
        given = [i.id for i in items if i.id is not None]
        duplicates = sorted({i for i in given if given.count(i) > 1})
        if duplicates:
            raise WorkStateError(f"todo ids must be unique; repeated: {', '.join(duplicates)}")
        with self.store.transaction() as db:
            next_id = self._next_id(db, session_id)
            taken = set(given)
            todos: list[Todo] = []
            for order, item in enumerate(items, 1):
                todo_id = item.id
                if todo_id is None:
                    # Zuno's ids are numbers that never repeat within a session,
                    # skipping any the caller chose.
                    while str(next_id) in taken:
                        next_id += 1
                    todo_id = str(next_id)
                    taken.add(todo_id)
                    next_id += 1
                todos.append(Todo(todo_id, item.content, item.status, order))
            _check_in_progress(todos)
            self._write(db, session_id, todos, next_id)
        return todos

    def change_todos(self, session_id: str, changes: list[TodoChange]) -> list[Todo]:
        """Change the content or status of existing items, found by id."""
        ids = [c.id for c in changes]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise WorkStateError(
                f"each todo id may appear once in changes; repeated: {', '.join(duplicates)}"
            )
        with self.store.transaction() as db:
            current = self._read(db, session_id)
            by_id = {t.todo_id: t for t in current}
            unknown = [i for i in ids if i not in by_id]
            if unknown:
                known = ", ".join(by_id) if by_id else "none (the list is empty)"
                raise WorkStateError(
                    f"unknown todo id(s): {', '.join(unknown)}. Known ids: {known}. "
                    "Call todo_get to see the list, or pass todos to set the whole list."
                )
            wanted = {c.id: c for c in changes}
            todos = [
                Todo(
                    t.todo_id,
                    wanted[t.todo_id].content or t.content,
                    wanted[t.todo_id].status or t.status,
                    t.order,
                )
                if t.todo_id in wanted
                else t
                for t in current
            ]
            _check_in_progress(todos)
            self._write(db, session_id, todos, self._next_id(db, session_id))
        return todos

    @staticmethod
    def _read(db: sqlite3.Connection, session_id: str) -> list[Todo]:
        rows = db.execute(
            "SELECT todo_id, content, status FROM work_todos WHERE session_id = ?"
            " ORDER BY position",
            (session_id,),
        ).fetchall()
        return [Todo(r[0], r[1], r[2], i) for i, r in enumerate(rows, 1)]

    @staticmethod
    def _next_id(db: sqlite3.Connection, session_id: str) -> int:
        row = db.execute(
            "SELECT next_id FROM work_todo_lists WHERE session_id = ?", (session_id,)
        ).fetchone()
        return int(row[0]) if row else 1

    @staticmethod
    def _write(db: sqlite3.Connection, session_id: str, todos: list[Todo], next_id: int) -> None:
        now = time.time()
        db.execute("DELETE FROM work_todos WHERE session_id = ?", (session_id,))
        db.executemany(
            "INSERT INTO work_todos (session_id, todo_id, position, content, status, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [(session_id, t.todo_id, t.order, t.content, t.status, now) for t in todos],
        )
        db.execute(
            "INSERT INTO work_todo_lists (session_id, next_id, revision, updated_at)"
            " VALUES (?, ?, 1, ?) ON CONFLICT (session_id) DO UPDATE SET"
            " next_id = excluded.next_id, revision = revision + 1,"
            " updated_at = excluded.updated_at",
            (session_id, next_id, now),
        )

    # Goal -----------------------------------------------------------------------

    def goal(self, session_id: str) -> Goal | None:
        """The session's goal, or None before the first update."""
        rows = self.store.query(
            "SELECT objective, status, criteria, revision, updated_at FROM work_goals"
            " WHERE session_id = ?",
            (session_id,),
        )
        if not rows:
            return None
        objective, status, criteria, revision, updated = rows[0]
        return Goal(objective, status, tuple(json.loads(criteria)), revision, updated)

    def update_goal(
        self,
        session_id: str,
        objective: str | None,
        status: GoalStatus | None,
        criteria: list[str] | None,
    ) -> Goal:
        """Set the given fields of the goal; omitted ones keep their value.

        Raises:
            WorkStateError: When there is no goal yet and no objective is given.
        """
        now = time.time()
        with self.store.transaction() as db:
            row = db.execute(
                "SELECT objective, status, criteria, revision FROM work_goals WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            if row is None:
                if objective is None:
                    raise WorkStateError(
                        "this session has no goal yet: give an objective to set one"
                    )
                old = Goal(objective, "active", (), 0, now)
            else:
                old = Goal(row[0], row[1], tuple(json.loads(row[2])), int(row[3]), now)
            goal = Goal(
                objective if objective is not None else old.objective,
                status if status is not None else old.status,
                tuple(criteria) if criteria is not None else old.criteria,
                old.revision + 1,
                now,
            )
            db.execute(
                "INSERT OR REPLACE INTO work_goals"
                " (session_id, objective, status, criteria, revision, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    goal.objective,
                    goal.status,
                    json.dumps(list(goal.criteria)),
                    goal.revision,
                    now,
                ),
            )
        return goal


def _check_in_progress(todos: list[Todo]) -> None:
    busy = [t.todo_id for t in todos if t.status == "in_progress"]
    if len(busy) > 1:
        raise WorkStateError(
            f"at most one todo may be in_progress; these would be: {', '.join(busy)}. "
            "Finish or pause the others (completed or pending) in the same update."
        )


# --- arguments -------------------------------------------------------------------


class NoArgs(ToolArgs):
    """No arguments."""


class PlanUpdateArgs(ToolArgs):
    """Arguments of ``plan_update``."""

    plan: str = Field(
        max_length=MAX_PLAN_CHARS,
        description=(
            f"The whole new plan as Markdown text (at most {MAX_PLAN_CHARS} characters). "
            "It replaces the previous plan; an empty string clears it."
        ),
    )


class TodoItem(ToolArgs):
    """One item of a whole todo list."""

    id: str | None = Field(
        default=None,
        pattern=_TODO_ID_PATTERN,
        description=(
            "Keep an item's existing id to keep its identity; omit it for a new item "
            "(Zuno assigns one). Letters, digits, '_', '.', '-'; at most 40 characters."
        ),
    )
    content: TodoText = Field(description="What to do, in one line.")
    status: TodoStatus = Field(default="pending", description="Default pending.")


class TodoChange(ToolArgs):
    """A change to one existing todo item."""

    id: str = Field(min_length=1, max_length=40, description="The id of an existing item.")
    content: TodoText | None = Field(default=None, description="New text.")
    status: TodoStatus | None = Field(default=None, description="New status.")

    @model_validator(mode="after")
    def _changes_something(self) -> Self:
        if self.content is None and self.status is None:
            raise ValueError(f"change of {self.id!r} sets neither content nor status")
        return self


class TodoUpdateArgs(ToolArgs):
    """Arguments of ``todo_update``: either the whole list or changes by id."""

    todos: list[TodoItem] | None = Field(
        default=None,
        max_length=MAX_TODOS,
        description=(
            f"The whole new list, in order (at most {MAX_TODOS} items); items left out "
            "are removed. Use this to add, remove or reorder items."
        ),
    )
    changes: list[TodoChange] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TODOS,
        description=(
            "Changes to existing items by id (content and/or status); the rest of "
            "the list stays as it is."
        ),
    )

    @model_validator(mode="after")
    def _one_form(self) -> Self:
        if (self.todos is None) == (self.changes is None):
            raise ValueError("give exactly one of `todos` (the whole list) or `changes` (by id)")
        return self


class GoalUpdateArgs(ToolArgs):
    """Arguments of ``goal_update``."""

    objective: Objective | None = Field(
        default=None,
        description=f"The objective of this session (at most {MAX_OBJECTIVE_CHARS} characters). "
        "Required when no goal is set yet.",
    )
    status: GoalStatus | None = Field(
        default=None,
        description="active (a new goal's default), achieved or abandoned.",
    )
    criteria: list[Criterion] | None = Field(
        default=None,
        max_length=MAX_CRITERIA,
        description=(
            f"Success criteria: what would show the objective is achieved (at most "
            f"{MAX_CRITERIA}, each at most {MAX_CRITERION_CHARS} characters). Replaces "
            "the previous list."
        ),
    )

    @model_validator(mode="after")
    def _sets_something(self) -> Self:
        if self.objective is None and self.status is None and self.criteria is None:
            raise ValueError("give at least one of objective, status or criteria")
        return self


# --- rendering -------------------------------------------------------------------


def _render_plan(plan: Plan | None) -> str:
    if plan is None or not plan.text.strip():
        return "No plan yet. Write one with plan_update."
    return f"Plan (revision {plan.revision}):\n{plan.text}"


def _render_todos(todos: list[Todo]) -> str:
    if not todos:
        return "The todo list is empty. Set it with todo_update."
    done = sum(t.status == "completed" for t in todos)
    lines = [f"Todos ({done} of {len(todos)} completed):"]
    lines.extend(f"{t.order}. [{t.status}] (id {t.todo_id}) {t.content}" for t in todos)
    return "\n".join(lines)


def _render_goal(goal: Goal | None) -> str:
    if goal is None:
        return "No goal set. Set one with goal_update."
    lines = [f"Goal ({goal.status}, revision {goal.revision}): {goal.objective}"]
    if goal.criteria:
        lines.append("Success criteria:")
        lines.extend(f"- {c}" for c in goal.criteria)
    else:
        lines.append("No success criteria.")
    return "\n".join(lines)


def _todo_data(todos: list[Todo]) -> dict[str, Any]:
    return {"todos": [t.as_dict() for t in todos]}


def _plan_data(plan: Plan | None) -> dict[str, Any]:
    if plan is None:
        return {"plan": None, "revision": 0}
    return {"plan": plan.text, "revision": plan.revision}


def _state(ctx: ToolContext) -> WorkState:
    store: Store | None = getattr(ctx.services, "store", None)
    if store is None:
        raise ToolError("the work state needs a runtime with a store; call it through a Runtime")
    return WorkState(store)


# --- tools -----------------------------------------------------------------------


class PlanGetTool(Tool[NoArgs]):
    """Read the session's plan."""

    name = "plan_get"
    description = "Read this session's plan (Markdown text kept by plan_update). Read-only."
    args_model = NoArgs
    declaration = _INSPECTION

    async def run(self, args: NoArgs, ctx: ToolContext) -> ToolResult:
        """Return the stored plan."""
        plan = _state(ctx).plan(ctx.session_id)
        return ToolResult(_render_plan(plan), data=_plan_data(plan))


class PlanUpdateTool(Tool[PlanUpdateArgs]):
    """Replace the session's plan."""

    name = "plan_update"
    description = (
        "Replace this session's plan with new Markdown text (the whole plan, at most "
        f"{MAX_PLAN_CHARS} characters; an empty string clears it). Kept durably per session."
    )
    args_model = PlanUpdateArgs

    async def run(self, args: PlanUpdateArgs, ctx: ToolContext) -> ToolResult:
        """Store the new plan."""
        plan = _state(ctx).set_plan(ctx.session_id, args.plan)
        head = (
            "Plan cleared." if not args.plan.strip() else f"Plan saved (revision {plan.revision})."
        )
        return ToolResult(head, data=_plan_data(plan))


class TodoGetTool(Tool[NoArgs]):
    """Read the session's todo list."""

    name = "todo_get"
    description = (
        "Read this session's todo list: each item's id, status and text, in order. Read-only."
    )
    args_model = NoArgs
    declaration = _INSPECTION

    async def run(self, args: NoArgs, ctx: ToolContext) -> ToolResult:
        """Return the stored todos."""
        todos = _state(ctx).todos(ctx.session_id)
        return ToolResult(_render_todos(todos), data=_todo_data(todos))


class TodoUpdateTool(Tool[TodoUpdateArgs]):
    """Set the session's todo list, or change items by id."""

    name = "todo_update"
    description = (
        "Update this session's todo list. Pass todos to set the whole list in order (add, "
        "remove, reorder; keep an item's id to keep it), or changes to set the content or "
        "status of existing items by id. Statuses: pending, in_progress, completed, "
        f"cancelled; at most one in_progress. At most {MAX_TODOS} items of "
        f"{MAX_TODO_CHARS} characters. Returns the whole list."
    )
    args_model = TodoUpdateArgs

    async def run(self, args: TodoUpdateArgs, ctx: ToolContext) -> ToolResult:
        """Replace or patch the stored todos."""
        state = _state(ctx)
        if args.todos is not None:
            todos = state.replace_todos(ctx.session_id, list(args.todos))
        else:
            assert args.changes is not None  # the model validator guarantees one form
            todos = state.change_todos(ctx.session_id, list(args.changes))
        return ToolResult(_render_todos(todos), data=_todo_data(todos))


class GoalGetTool(Tool[NoArgs]):
    """Read the session's goal."""

    name = "goal_get"
    description = (
        "Read this session's goal: the objective, its status (active, achieved, "
        "abandoned) and its success criteria. Read-only."
    )
    args_model = NoArgs
    declaration = _INSPECTION

    async def run(self, args: NoArgs, ctx: ToolContext) -> ToolResult:
        """Return the stored goal."""
        goal = _state(ctx).goal(ctx.session_id)
        return ToolResult(_render_goal(goal), data={"goal": goal.as_dict() if goal else None})


class GoalUpdateTool(Tool[GoalUpdateArgs]):
    """Set or change the session's goal."""

    name = "goal_update"
    description = (
        "Set or change this session's goal (one per session). Fields given replace the "
        "stored ones; omitted fields keep their value. The first update needs an "
        "objective. Mark the goal achieved or abandoned with status when done."
    )
    args_model = GoalUpdateArgs

    async def run(self, args: GoalUpdateArgs, ctx: ToolContext) -> ToolResult:
        """Store the goal's new fields."""
        criteria = list(args.criteria) if args.criteria is not None else None
        goal = _state(ctx).update_goal(ctx.session_id, args.objective, args.status, criteria)
        return ToolResult(_render_goal(goal), data={"goal": goal.as_dict()})


def state_tools() -> list[Tool[Any]]:
    """A fresh instance of each work-state tool, getters and updates."""
    return [
        PlanGetTool(),
        PlanUpdateTool(),
        TodoGetTool(),
        TodoUpdateTool(),
        GoalGetTool(),
        GoalUpdateTool(),
    ]
