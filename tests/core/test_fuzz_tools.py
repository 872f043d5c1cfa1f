"""Fuzzed arguments to every built-in tool, through the whole dispatcher.

Only three things may come back: a valid result (ok or a tool's own error),
or ``blocked: invalid_arguments``. Never an unhandled exception, never a
crash inside a tool.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zuno.config.loading import Config
from zuno.core.declarations import BlockKind, Outcome
from zuno.core.tool_names import OPT_IN
from zuno.dispatch.dispatcher import CallRequest
from zuno.policy.approvals import ApproveAll
from zuno.policy.hooks import HookCall, HookDecision
from zuno.session.builtin_tools import builtin_tools
from zuno.session.runtime import Runtime

# Calls that would start processes or agents are stopped by a hook after
# validation and classification, which is the part being fuzzed here.
_NOT_EXECUTED = {
    "shell",
    "execute",
    "exec_command",
    "undo",
    "task",
    "council_run",
    "bg",
    "webfetch",
    "web_search",
}


def _stop_processes(call: HookCall) -> HookDecision | None:
    if call.tool in _NOT_EXECUTED:
        return HookDecision(False, "not executed in the fuzz test")
    return None


_TMP = tempfile.TemporaryDirectory()
_ROOT = Path(_TMP.name)
(_ROOT / "ws" / "src").mkdir(parents=True)
(_ROOT / "ws" / "src" / "a.py").write_text("def f():\n    return 1\n")
(_ROOT / "ws" / "README.md").write_text("hello\n")
# Every registered tool: the slots and the conditional tools included. The
# inspection rule is off: this test is about arguments, not about sequences.
_CONFIG = Config.model_validate(
    {
        "tools": {
            "edit": True,
            "execute": True,
            "lsp": True,
            **dict.fromkeys(OPT_IN, True),
        },
        "memory": {"enabled": True},
        "council": {"members": ["explore", "build"]},
        "replay": {"require_inspection": False},
        # web_search is offered only with a backend (never reached: the hook stops it).
        "web": {"search": {"kind": "searxng", "base_url": "http://127.0.0.1:9"}},
    }
)
RUNTIME = Runtime(
    _ROOT / "ws",
    config=_CONFIG,
    db_path=_ROOT / "fuzz.db",
    approver=ApproveAll(),
    tools=builtin_tools(_CONFIG),
    before_hooks=[_stop_processes],
)
SESSION = RUNTIME.open_session()
TOOLS = {t.name: t for t in RUNTIME.registry._tools.values()}  # pyright: ignore[reportPrivateUsage]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", ".", "..", "/", "src", "src/a.py", "*.py", "**", "[", "(", "\\", "\x00"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def arguments(draw: st.DrawFn) -> tuple[str, Any]:
    name = draw(st.sampled_from(sorted(TOOLS)))
    props = list(TOOLS[name].schema().get("properties", {}))
    keys = draw(st.lists(st.sampled_from([*props, "bogus"]), max_size=len(props) + 1, unique=True))
    args: Any = {key: draw(values) for key in keys}
    if draw(st.integers(0, 9)) == 0:
        args = draw(st.one_of(st.text(max_size=30), values))  # raw junk instead of an object
    return name, args


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call=arguments())
def test_fuzzed_arguments_never_crash(call: tuple[str, Any]) -> None:
    name, args = call
    if not isinstance(args, (str, dict)):
        args = str(args)

    async def go() -> Any:
        return await RUNTIME.dispatch(SESSION, [CallRequest(name, args)])

    (result,) = anyio.run(go)
    assert "failed inside Zuno" not in result.output, result.output
    if result.outcome is Outcome.BLOCKED:
        assert result.block_kind in (BlockKind.INVALID_ARGUMENTS, BlockKind.DENIED)
        if result.block_kind is BlockKind.DENIED:
            assert name in _NOT_EXECUTED
    else:
        assert result.outcome in (Outcome.OK, Outcome.ERROR)
