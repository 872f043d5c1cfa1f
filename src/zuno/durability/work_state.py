"""The work state of sessions, kept in SQL: a plan, a todo list and a goal each.

The tools that read and change it are in :mod:`zuno.tools.state`. Each family
has its own tables, created on first use (see :class:`WorkState`).
"""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from zuno.contract.tool import ArgumentsRejected
from zuno.durability.store import Store
from zuno.durability.store.connection import StoreConnection

__all__ = [
    "STATE_SCHEMA",
    "Goal",
    "GoalStatus",
    "NewTodo",
    "Plan",
    "Todo",
    "TodoEdit",
    "TodoStatus",
    "WorkState",
    "WorkStateError",
]

TodoStatus = Literal["pending", "in_progress", "completed", "cancelled"]
GoalStatus = Literal["active", "achieved", "abandoned"]


class NewTodo(Protocol):
    """One item of a whole new todo list (:class:`zuno.tools.state.TodoItem`)."""

    @property
    def id(self) -> str | None:
        """The item's id to keep; None for a new item."""
        ...

    @property
    def content(self) -> str:
        """What to do, in one line."""
        ...

    @property
    def status(self) -> TodoStatus:
        """Where the item stands."""
        ...


class TodoEdit(Protocol):
    """A change to one existing item (:class:`zuno.tools.state.TodoChange`)."""

    @property
    def id(self) -> str:
        """The id of the item to change."""
        ...

    @property
    def content(self) -> str | None:
        """Its new text, or None to keep it."""
        ...

    @property
    def status(self) -> TodoStatus | None:
        """Its new status, or None to keep it."""
        ...


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
        return _todos(self.store.query(_SELECT_TODOS, (session_id,)))

    def replace_todos(self, session_id: str, items: Sequence[NewTodo]) -> list[Todo]:
        """Make ``items`` the whole list, in that order; items without an id get a new one."""
        given = [i.id for i in items if i.id is not None]
        if repeated := _repeated(given):
            raise WorkStateError(f"todo ids must be unique; repeated: {repeated}")
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

    def change_todos(self, session_id: str, changes: Sequence[TodoEdit]) -> list[Todo]:
        """Change the content or status of existing items, found by id."""
        ids = [c.id for c in changes]
        if repeated := _repeated(ids):
            raise WorkStateError(f"each todo id may appear once in changes; repeated: {repeated}")
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
    def _read(db: StoreConnection, session_id: str) -> list[Todo]:
        return _todos(db.execute(_SELECT_TODOS, (session_id,)).fetchall())

    @staticmethod
    def _next_id(db: StoreConnection, session_id: str) -> int:
        row = db.execute(
            "SELECT next_id FROM work_todo_lists WHERE session_id = ?", (session_id,)
        ).fetchone()
        return int(row[0]) if row else 1

    @staticmethod
    def _write(db: StoreConnection, session_id: str, todos: list[Todo], next_id: int) -> None:
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


_SELECT_TODOS = (
    "SELECT todo_id, content, status FROM work_todos WHERE session_id = ? ORDER BY position"
)


def _todos(rows: Sequence[Sequence[Any]]) -> list[Todo]:
    return [Todo(r[0], r[1], r[2], i) for i, r in enumerate(rows, 1)]


def _repeated(ids: list[str]) -> str:
    """The ids that occur more than once, sorted and comma-separated ("" for none)."""
    return ", ".join(sorted({i for i in ids if ids.count(i) > 1}))


def _check_in_progress(todos: list[Todo]) -> None:
    busy = [t.todo_id for t in todos if t.status == "in_progress"]
    if len(busy) > 1:
        raise WorkStateError(
            f"at most one todo may be in_progress; these would be: {', '.join(busy)}. "
            "Finish or pause the others (completed or pending) in the same update."
        )
