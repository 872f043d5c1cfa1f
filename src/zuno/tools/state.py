"""Durable work state: a plan, a todo list and a goal per session, kept in SQL.

``plan_get`` / ``plan_update``, ``todo_get`` / ``todo_update`` and ``goal_get`` /
``goal_update`` let an agent keep its working state in the store rather than
in transcript prose, so a resumed session or a recovery turn reads the same
state a person sees.

The getters only read (ReadOnly / Safe / ParallelSafe). The updates change
durable state, so they keep the strict defaults (SideEffecting / Never /
Exclusive): strict mode asks before each one unless a permission rule allows
it, and an update is never replayed by the runtime.

The state itself, and its tables, are :mod:`zuno.durability.work_state`.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Annotated, Any, Self, TypeVar

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from zuno.core.declarations import Concurrency, Declaration, Effect, Replay
from zuno.durability.store import Store
from zuno.durability.work_state import (
    STATE_SCHEMA,
    Goal,
    GoalStatus,
    Plan,
    Todo,
    TodoStatus,
    WorkState,
    WorkStateError,
)

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

A = TypeVar("A", bound=ToolArgs)

_TODO_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$"
_INSPECTION = Declaration(Effect.READ_ONLY, Replay.SAFE, Concurrency.PARALLEL_SAFE)

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


class _WorkStateTool(Tool[A]):
    """A tool over the calling session's work state."""

    changes_workspace = False  # the state lives in the store, not in files

    async def run(self, args: A, ctx: ToolContext) -> ToolResult:
        """Apply the tool to the work state of the calling session."""
        return self.apply(_state(ctx), ctx.session_id, args)

    @abstractmethod
    def apply(self, state: WorkState, session_id: str, args: A) -> ToolResult:
        """Read or change ``session_id``'s state as ``args`` say."""


class _WorkStateInspection(_WorkStateTool[NoArgs]):
    """A getter: no arguments, and it only reads."""

    args_model = NoArgs
    declaration = _INSPECTION


class PlanGetTool(_WorkStateInspection):
    """Read the session's plan."""

    name = "plan_get"
    description = "Read this session's plan (Markdown text kept by plan_update). Read-only."

    def apply(self, state: WorkState, session_id: str, args: NoArgs) -> ToolResult:
        """Return the stored plan."""
        plan = state.plan(session_id)
        return ToolResult(_render_plan(plan), data=_plan_data(plan))


class PlanUpdateTool(_WorkStateTool[PlanUpdateArgs]):
    """Replace the session's plan."""

    name = "plan_update"
    description = (
        "Replace this session's plan with new Markdown text (the whole plan, at most "
        f"{MAX_PLAN_CHARS} characters; an empty string clears it). Kept durably per session."
    )
    args_model = PlanUpdateArgs

    def apply(self, state: WorkState, session_id: str, args: PlanUpdateArgs) -> ToolResult:
        """Store the new plan."""
        plan = state.set_plan(session_id, args.plan)
        head = (
            "Plan cleared." if not args.plan.strip() else f"Plan saved (revision {plan.revision})."
        )
        return ToolResult(head, data=_plan_data(plan))


class TodoGetTool(_WorkStateInspection):
    """Read the session's todo list."""

    name = "todo_get"
    description = (
        "Read this session's todo list: each item's id, status and text, in order. Read-only."
    )

    def apply(self, state: WorkState, session_id: str, args: NoArgs) -> ToolResult:
        """Return the stored todos."""
        todos = state.todos(session_id)
        return ToolResult(_render_todos(todos), data=_todo_data(todos))


class TodoUpdateTool(_WorkStateTool[TodoUpdateArgs]):
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

    def apply(self, state: WorkState, session_id: str, args: TodoUpdateArgs) -> ToolResult:
        """Replace or patch the stored todos."""
        if args.todos is not None:
            todos = state.replace_todos(session_id, list(args.todos))
        else:
            assert args.changes is not None  # the model validator guarantees one form
            todos = state.change_todos(session_id, list(args.changes))
        return ToolResult(_render_todos(todos), data=_todo_data(todos))


class GoalGetTool(_WorkStateInspection):
    """Read the session's goal."""

    name = "goal_get"
    description = (
        "Read this session's goal: the objective, its status (active, achieved, "
        "abandoned) and its success criteria. Read-only."
    )

    def apply(self, state: WorkState, session_id: str, args: NoArgs) -> ToolResult:
        """Return the stored goal."""
        goal = state.goal(session_id)
        return ToolResult(_render_goal(goal), data={"goal": goal.as_dict() if goal else None})


class GoalUpdateTool(_WorkStateTool[GoalUpdateArgs]):
    """Set or change the session's goal."""

    name = "goal_update"
    description = (
        "Set or change this session's goal (one per session). Fields given replace the "
        "stored ones; omitted fields keep their value. The first update needs an "
        "objective. Mark the goal achieved or abandoned with status when done."
    )
    args_model = GoalUpdateArgs

    def apply(self, state: WorkState, session_id: str, args: GoalUpdateArgs) -> ToolResult:
        """Store the goal's new fields."""
        criteria = list(args.criteria) if args.criteria is not None else None
        goal = state.update_goal(session_id, args.objective, args.status, criteria)
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
