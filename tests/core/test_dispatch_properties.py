"""Property test: thousands of random batches with mixed declarations."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probe_tools import Recorder, probe_tools
from zuno.config.loading import Config
from zuno.core.declarations import Outcome
from zuno.dispatch.dispatcher import CallRequest
from zuno.policy.approvals import ApprovalRequest, CallbackApprover
from zuno.session.runtime import Runtime

call_strategy = st.one_of(
    st.fixed_dictionaries(
        {
            "kind": st.just("probe"),
            "mode": st.sampled_from(["exclusive", "parallel", "parallel", "background"]),
            "effect": st.sampled_from(["read_only", "side_effecting"]),
            "delay": st.sampled_from([0.0, 0.0, 0.0, 0.001]),
            "deny": st.booleans(),
        }
    ),
    st.fixed_dictionaries({"kind": st.sampled_from(["unknown", "bad_json", "bad_field"])}),
)


def _deny_tagged(request: ApprovalRequest) -> bool:
    return not str(request.arguments.get("tag", "")).startswith("deny")


class _World:
    def __init__(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        root = Path(self.tmp.name)
        (root / "ws").mkdir()
        self.recorder = Recorder()
        self.runtimes: dict[int, Runtime] = {}
        self.root = root

    def runtime(self, bound: int) -> Runtime:
        if bound not in self.runtimes:
            self.runtimes[bound] = Runtime(
                self.root / "ws",
                config=Config.model_validate({"concurrency": {"tool_calls": bound}}),
                db_path=self.root / f"zuno-{bound}.db",
                approver=CallbackApprover(_deny_tagged),
                tools=probe_tools(self.recorder),
            )
        return self.runtimes[bound]


WORLD = _World()


def _request(i: int, spec: dict[str, Any]) -> CallRequest:
    kind = spec["kind"]
    if kind == "unknown":
        return CallRequest("no_such_tool", {"tag": f"u{i}"})
    if kind == "bad_json":
        return CallRequest("probe", '{"tag": ')
    if kind == "bad_field":
        return CallRequest("probe", {"tag": f"b{i}", "delay": -1})
    tag = f"{'deny' if spec['deny'] and spec['effect'] == 'side_effecting' else 'c'}{i}"
    return CallRequest(
        "probe",
        {"tag": tag, "mode": spec["mode"], "effect": spec["effect"], "delay": spec["delay"]},
    )


@settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(specs=st.lists(call_strategy, min_size=1, max_size=12), bound=st.sampled_from([1, 2, 3, 8]))
def test_random_batches_keep_every_dispatch_invariant(
    specs: list[dict[str, Any]], bound: int
) -> None:
    rt = WORLD.runtime(bound)
    rec = WORLD.recorder
    rec.events.clear()
    rec.effects.clear()
    requests = [_request(i, spec) for i, spec in enumerate(specs)]

    async def go() -> Any:
        session = rt.open_session()
        return session, await rt.dispatch(session, requests)

    session, results = anyio.run(go)

    # Results in model order, one per request.
    assert [r.index for r in results] == list(range(len(requests)))
    intervals = rec.intervals()
    modes = {
        r.arguments["tag"]: r.arguments["mode"]  # type: ignore[index]
        for r in requests
        if r.tool == "probe" and isinstance(r.arguments, dict) and "mode" in r.arguments
    }
    # An Exclusive call never overlaps any other call.
    for tag, (s1, e1) in intervals.items():
        if modes.get(tag) != "exclusive":
            continue
        for other, (s2, e2) in intervals.items():
            if other != tag:
                assert e1 < s2 or e2 < s1, f"{tag} overlapped {other}"
    # ParallelSafe overlap never exceeds the bound.
    running = peak = 0
    for what, tag, _ in sorted(rec.events, key=lambda e: e[2]):
        if modes.get(tag) != "parallel":
            continue
        running += 1 if what == "start" else -1
        peak = max(peak, running)
    assert peak <= bound
    # Blocked calls: their event precedes their result, and they changed nothing.
    events = rt.store.events(session.session_id)
    position = {(e.kind, e.call_id): i for i, e in enumerate(events)}
    for result in results:
        if result.outcome is Outcome.BLOCKED:
            assert (
                position[("dispatch.blocked", result.call_id)]
                < position[("call.result", result.call_id)]
            )
            tag = requests[result.index].arguments
            if isinstance(tag, dict):
                assert tag.get("tag") not in intervals
                assert tag.get("tag") not in rec.effects
        else:
            assert result.outcome is Outcome.OK
    # call.result events are in model order.
    result_events = [e.call_id for e in events if e.kind == "call.result"]
    assert result_events == [r.call_id for r in results]
