"""Plan, todo and goal tools through the dispatcher: storage, validation, approvals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from zuno.config.loading import Config
from zuno.core.declarations import BlockKind, Effect, Outcome
from zuno.policy.approvals import ApprovalRequest, ApproveAll, CallbackApprover, DenyAll
from zuno.session.runtime import Runtime
from zuno.tools.state import MAX_TODOS, TodoItem, TodoUpdateArgs

pytestmark = pytest.mark.anyio

GETTERS = ("plan_get", "todo_get", "goal_get")
UPDATES: dict[str, dict[str, Any]] = {
    "plan_update": {"plan": "1. read\n2. fix"},
    "todo_update": {"todos": [{"content": "write tests"}]},
    "goal_update": {"objective": "ship it"},
}


def make_runtime(workspace: Path, tmp_path: Path, approver: Any = None, **config: Any) -> Runtime:
    return Runtime(
        workspace,
        config=Config.model_validate(config),
        db_path=tmp_path / "zuno.db",
        approver=approver or ApproveAll(),
    )


# --- approvals ---------------------------------------------------------------------


async def test_strict_mode_asks_neither_for_updates_nor_getters(
    workspace: Path, tmp_path: Path
) -> None:
    asked: list[str] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request.tool)
        return True

    rt = make_runtime(workspace, tmp_path, CallbackApprover(approve))
    session = rt.open_session()
    for name in GETTERS:
        result = await rt.call(session, name, {})
        assert result.outcome is Outcome.OK, result.output
        assert result.declaration is not None
        assert result.declaration.effect is Effect.READ_ONLY
    assert asked == []
    for name, args in UPDATES.items():
        result = await rt.call(session, name, args)
        assert result.outcome is Outcome.OK, result.output
        assert result.declaration is not None
        assert result.declaration.effect is Effect.SIDE_EFFECTING
    # They change only the session's own state: never asked about (issue 19).
    assert asked == []


async def test_denied_update_changes_nothing(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(
        workspace,
        tmp_path,
        DenyAll(),
        permission={"rules": [{"tool": "plan_update", "action": "deny"}]},
    )
    session = rt.open_session()
    result = await rt.call(session, "plan_update", {"plan": "secret plan"})
    assert result.outcome is Outcome.BLOCKED and result.block_kind is BlockKind.DENIED
    plan = await rt.call(session, "plan_get", {})
    assert plan.outcome is Outcome.OK
    assert "No plan yet" in plan.output


async def test_updates_run_unasked_unless_a_deny_rule_refuses_them(
    workspace: Path, tmp_path: Path
) -> None:
    rt = make_runtime(
        workspace,
        tmp_path,
        DenyAll(),  # no one to ask: an update that asked would be denied
        permission={"rules": [{"tool": "goal_*", "action": "deny"}]},
    )
    session = rt.open_session()
    result = await rt.call(session, "todo_update", UPDATES["todo_update"])
    assert result.outcome is Outcome.OK, result.output
    denied = await rt.call(session, "goal_update", UPDATES["goal_update"])
    assert denied.block_kind is BlockKind.DENIED


# --- plan ------------------------------------------------------------------------


async def test_plan_is_replaced_and_kept_per_session(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path)
    one, two = rt.open_session(), rt.open_session()
    await rt.call(one, "plan_update", {"plan": "first"})
    await rt.call(one, "plan_update", {"plan": "second"})
    got = await rt.call(one, "plan_get", {})
    assert got.output == "Plan (revision 2):\nsecond"
    assert got.data == {"plan": "second", "revision": 2}
    other = await rt.call(two, "plan_get", {})
    assert "No plan yet" in other.output
    cleared = await rt.call(one, "plan_update", {"plan": ""})
    assert cleared.output == "Plan cleared."


async def test_state_survives_a_new_runtime_on_the_same_store(
    workspace: Path, tmp_path: Path
) -> None:
    rt = make_runtime(workspace, tmp_path)
    session = rt.open_session()
    await rt.call(session, "goal_update", {"objective": "port the parser"})
    rt.close()
    again = make_runtime(workspace, tmp_path)
    resumed = again.open_session(session.session_id)
    goal = await again.call(resumed, "goal_get", {})
    assert "port the parser" in goal.output


# --- todos -------------------------------------------------------------------------


async def test_todo_ids_are_assigned_kept_and_never_reused(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    first = await rt.call(
        s,
        "todo_update",
        {"todos": [{"content": "a"}, {"content": "b", "id": "2"}, {"content": "c"}]},
    )
    assert first.data is not None
    # Zuno's numbers skip an id the caller chose.
    assert [t["id"] for t in first.data["todos"]] == ["1", "2", "3"]
    # Reorder, drop "1", add one: kept ids keep their identity, new ids are fresh.
    second = await rt.call(
        s,
        "todo_update",
        {"todos": [{"id": "3", "content": "c", "status": "in_progress"}, {"content": "d"}]},
    )
    assert second.data is not None
    assert second.data["todos"] == [
        {"id": "3", "content": "c", "status": "in_progress", "order": 1},
        {"id": "4", "content": "d", "status": "pending", "order": 2},
    ]
    again = await rt.call(s, "todo_update", {"todos": [{"content": "e"}]})
    assert again.data is not None and again.data["todos"][0]["id"] == "5"


async def test_todo_changes_patch_by_id(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    await rt.call(s, "todo_update", {"todos": [{"content": "a"}, {"content": "b"}]})
    result = await rt.call(
        s,
        "todo_update",
        {"changes": [{"id": "2", "status": "completed"}, {"id": "1", "content": "A!"}]},
    )
    assert result.outcome is Outcome.OK, result.output
    got = await rt.call(s, "todo_get", {})
    assert got.output == (
        "Todos (1 of 2 completed):\n1. [pending] (id 1) A!\n2. [completed] (id 2) b"
    )


async def test_unknown_todo_id_is_a_clear_error_and_changes_nothing(
    workspace: Path, tmp_path: Path
) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    await rt.call(s, "todo_update", {"todos": [{"content": "a"}]})
    result = await rt.call(
        s,
        "todo_update",
        {"changes": [{"id": "1", "status": "completed"}, {"id": "9", "status": "completed"}]},
    )
    assert result.outcome is Outcome.BLOCKED
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "unknown todo id(s): 9. Known ids: 1." in result.output
    assert "todo_get" in result.output
    got = await rt.call(s, "todo_get", {})
    assert "[pending] (id 1) a" in got.output  # the valid change was not applied either


async def test_changes_to_an_empty_list_say_so(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path)
    result = await rt.call(
        rt.open_session(), "todo_update", {"changes": [{"id": "1", "status": "completed"}]}
    )
    assert result.outcome is Outcome.BLOCKED
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "none (the list is empty)" in result.output


async def test_bad_status_is_blocked_with_the_allowed_values(
    workspace: Path, tmp_path: Path
) -> None:
    rt = make_runtime(workspace, tmp_path)
    result = await rt.call(
        rt.open_session(), "todo_update", {"todos": [{"content": "a", "status": "done"}]}
    )
    assert result.outcome is Outcome.BLOCKED
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "todos.0.status" in result.output
    assert "'pending', 'in_progress', 'completed' or 'cancelled'" in result.output


async def test_two_in_progress_are_refused(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    result = await rt.call(
        s,
        "todo_update",
        {
            "todos": [
                {"content": "a", "status": "in_progress"},
                {"content": "b", "status": "in_progress"},
            ]
        },
    )
    assert result.outcome is Outcome.BLOCKED
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "at most one todo may be in_progress; these would be: 1, 2" in result.output
    got = await rt.call(s, "todo_get", {})
    assert "empty" in got.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({}, "exactly one of `todos`"),
        ({"todos": [], "changes": [{"id": "1", "status": "completed"}]}, "exactly one of"),
        ({"changes": [{"id": "1"}]}, "sets neither content nor status"),
        ({"todos": [{"content": "   "}]}, "todos.0.content"),
        ({"todos": [{"content": "a", "id": "no spaces"}]}, "todos.0.id"),
        ({"todos": [{"content": "a", "colour": "red"}]}, "not an argument"),
    ],
)
async def test_malformed_todo_updates_are_blocked(
    workspace: Path, tmp_path: Path, args: dict[str, Any], needle: str
) -> None:
    rt = make_runtime(workspace, tmp_path)
    result = await rt.call(rt.open_session(), "todo_update", args)
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert needle in result.output


async def test_repeated_ids_are_refused(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path)
    result = await rt.call(
        rt.open_session(),
        "todo_update",
        {"todos": [{"id": "x", "content": "a"}, {"id": "x", "content": "b"}]},
    )
    assert result.outcome is Outcome.BLOCKED
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "repeated: x" in result.output


async def test_an_empty_list_clears_the_todos(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    await rt.call(s, "todo_update", {"todos": [{"content": "a"}]})
    result = await rt.call(s, "todo_update", {"todos": []})
    assert result.outcome is Outcome.OK
    assert result.data == {"todos": []}


# --- goal ----------------------------------------------------------------------------


async def test_goal_fields_update_independently(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    first = await rt.call(s, "goal_update", {"status": "achieved"})
    assert first.outcome is Outcome.BLOCKED and first.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "no goal yet: give an objective" in first.output
    # A refusal changed nothing, so no inspection is required before the next change.
    assert "No goal set" in (await rt.call(s, "goal_get", {})).output
    set_ = await rt.call(s, "goal_update", {"objective": "fix #12", "criteria": [" tests pass "]})
    assert set_.outcome is Outcome.OK, set_.output
    await rt.call(s, "goal_update", {"status": "achieved"})
    got = await rt.call(s, "goal_get", {})
    assert got.data == {
        "goal": {
            "objective": "fix #12",
            "status": "achieved",
            "criteria": ["tests pass"],
            "revision": 2,
        }
    }
    assert got.output == ("Goal (achieved, revision 2): fix #12\nSuccess criteria:\n- tests pass")


@pytest.mark.parametrize(
    "args",
    [{}, {"status": "done"}, {"objective": ""}, {"objective": "x", "criteria": [""]}],
)
async def test_malformed_goal_updates_are_blocked(
    workspace: Path, tmp_path: Path, args: dict[str, Any]
) -> None:
    rt = make_runtime(workspace, tmp_path)
    result = await rt.call(rt.open_session(), "goal_update", args)
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS


async def test_explore_agent_sees_only_the_getters(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path)
    names = rt.surface("explore").names
    assert {"plan_get", "todo_get", "goal_get"} <= set(names)
    assert not {"plan_update", "todo_update", "goal_update"} & set(names)


# --- properties ------------------------------------------------------------------------

statuses = st.sampled_from(["pending", "in_progress", "completed", "cancelled"])
items = st.fixed_dictionaries(
    {"content": st.text(min_size=1, max_size=30).filter(lambda t: t.strip() != "")},
    optional={"status": statuses},
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lists=st.lists(st.lists(items, max_size=6), min_size=1, max_size=4))
def test_whole_list_updates_round_trip(tmp_path: Path, lists: list[list[dict[str, Any]]]) -> None:
    """Whatever valid lists are set, todo_get shows the last one, ids unique."""
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)

    async def main() -> None:
        rt = make_runtime(ws, tmp_path)
        try:
            s = rt.open_session()
            expected: list[dict[str, Any]] | None = None
            for todos in lists:
                result = await rt.call(s, "todo_update", {"todos": todos})
                busy = sum(t.get("status") == "in_progress" for t in todos)
                if busy > 1:
                    assert result.outcome is Outcome.BLOCKED
                    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
                    continue
                assert result.outcome is Outcome.OK, result.output
                expected = [
                    {
                        "content": TodoItem.model_validate(t).content,
                        "status": t.get("status", "pending"),
                    }
                    for t in todos
                ]
            got = await rt.call(s, "todo_get", {})
            assert got.data is not None
            stored = got.data["todos"]
            ids = [t["id"] for t in stored]
            assert len(ids) == len(set(ids))
            assert [t["order"] for t in stored] == list(range(1, len(stored) + 1))
            assert [{"content": t["content"], "status": t["status"]} for t in stored] == (
                expected or []
            )
        finally:
            rt.close()

    anyio.run(main)


@settings(max_examples=200, deadline=None)
@given(
    raw=st.dictionaries(
        st.sampled_from(["todos", "changes", "bogus"]),
        st.one_of(
            st.none(),
            st.lists(
                st.dictionaries(
                    st.sampled_from(["id", "content", "status"]),
                    st.one_of(st.text(max_size=5), st.integers(), st.none(), statuses),
                    max_size=3,
                ),
                max_size=3,
            ),
        ),
        max_size=3,
    )
)
def test_todo_args_either_validate_to_one_form_or_fail_cleanly(raw: dict[str, Any]) -> None:
    try:
        args = TodoUpdateArgs.model_validate(raw)
    except ValidationError:
        return
    assert (args.todos is None) != (args.changes is None)
    assert len(args.todos or args.changes or []) <= MAX_TODOS
    for change in args.changes or []:
        assert change.content is not None or change.status is not None
