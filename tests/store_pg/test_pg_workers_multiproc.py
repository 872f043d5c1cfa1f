"""Several workers, as processes in separate PID namespaces, sharing one PostgreSQL history.

Each worker is ``tests/store_pg/worker_harness.py`` run as init of its own PID
namespace (``unshare --pid --fork --mount-proc``): its pid means nothing to
the other workers, as between two hosts, so liveness can only come from the
lease rows in the database. The tests judge by the rows, read over their own
connection, and by the effects file the test tool appends to.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from worker_harness import (
    Cluster,
    Worker,
    app_name,
    cluster,
    namespace_prefix,
    running_call,
    scenario_killed_owner,
    scenario_late_result,
    scenario_many_writers,
    scenario_paused_job_owner,
    scenario_paused_owner,
    scenario_ping_pong,
    scenario_second_process,
    scenario_takeover_race,
)

pytestmark = pytest.mark.skipif(
    namespace_prefix() is None, reason="unshare cannot make a PID namespace here"
)


def _with_params(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in params]
    return urlunsplit(parts._replace(query=urlencode([*query, *params.items()])))


def _worker_url(dsn: str) -> Callable[[str], str]:
    # Each worker's connections carry its name, so the test can find (and kill) them.
    return lambda name: _with_params(dsn, application_name=app_name(name))


@pytest.fixture
def pg_cluster(pg_dsn: str, tmp_path: Path) -> Iterator[Cluster]:
    with cluster(pg_dsn, tmp_path, dict(os.environ), _worker_url(pg_dsn)) as c:
        yield c


def test_a_paused_owner_is_settled_only_after_its_lease(pg_cluster: Cluster) -> None:
    scenario_paused_owner(pg_cluster)


def test_a_paused_owners_job_is_lost_only_after_its_lease(pg_cluster: Cluster) -> None:
    scenario_paused_job_owner(pg_cluster)


def test_a_killed_owner_is_settled_after_its_lease(pg_cluster: Cluster) -> None:
    scenario_killed_owner(pg_cluster)


def test_a_late_result_never_overwrites(pg_cluster: Cluster) -> None:
    scenario_late_result(pg_cluster)


def test_a_late_result_after_the_connection_was_cut(pg_cluster: Cluster) -> None:
    """The owner's connections are cut while it is paused: it reconnects, and its late
    result still goes beside the settled row."""

    def cut(worker: Worker) -> None:
        killed = pg_cluster.reader.rows(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?",
            (app_name(worker.name),),
        )
        assert killed, "the paused owner had no connection to cut"

    scenario_late_result(pg_cluster, before_resume=cut)


def test_a_second_process_is_refused_then_takes_over(pg_cluster: Cluster) -> None:
    scenario_second_process(pg_cluster)


def test_a_session_handed_back_and_forth_keeps_its_steps_apart(pg_cluster: Cluster) -> None:
    scenario_ping_pong(pg_cluster)


def test_workers_racing_for_an_orphaned_session(pg_cluster: Cluster) -> None:
    scenario_takeover_race(pg_cluster)


def test_a_connection_killed_mid_call_leaves_the_worker_working(pg_cluster: Cluster) -> None:
    c = pg_cluster
    owner = c.spawn("owner", lease_seconds=4)
    other = c.spawn("other", lease_seconds=4)
    session = owner.open()
    call_id = running_call(c, owner, session, "cut")
    name = app_name(owner.name)
    killed = c.reader.rows(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?",
        (name,),
    )
    assert killed and all(ok for (ok,) in killed), killed
    killed_at = c.reader.now()
    c.open_gate("cut")
    answer = owner.outcome("cut")
    assert answer.get("outcome") == "ok", answer
    status, outcome, result, _ = c.reader.call_with_time(call_id)
    assert (status, outcome, result) == ("finished", "ok", "done cut"), (
        f"the row is {(status, outcome, result)} after the worker answered {answer}\n"
        + owner.diagnostics()
    )
    owner.call("next")
    assert owner.outcome("next").get("outcome") == "ok"
    # Cut again while the worker is idle: the next call must still work.
    c.reader.rows(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?",
        (name,),
    )
    owner.call("again", effect="read_only")
    assert owner.outcome("again").get("outcome") == "ok"
    rows = c.reader.calls(session)
    assert [(r["status"], r["outcome"]) for r in rows] == [("finished", "ok")] * 3, rows
    assert c.reader.rows("SELECT count(*) FROM calls WHERE status = 'started'") == [(0,)]
    assert c.effects() == ["cut", "next"]
    # The lease survived the cut: long after it would have run out, the session is still held.
    lease = 4.0
    deadline_ok = killed_at + 2 * lease
    while c.reader.now() < deadline_ok:
        owner.whoami()  # keeps the loop bounded by real work, not a fixed sleep
    refused = other.request("open", session=session)
    assert not refused["ok"] and refused["error"] == "SessionBusy", (
        f"another worker took the session of a live worker whose connection was cut: {refused}"
    )


@pytest.fixture
def repeatable_read_dsn(pg_dsn: str) -> Iterator[str]:
    """A database of its own whose default isolation is REPEATABLE READ."""
    import psycopg

    parts = urlsplit(pg_dsn)
    name = f"zuno_mp_rr_{uuid.uuid4().hex[:10]}"
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    dsn = urlunsplit(parts._replace(path=f"/{name}", query=urlencode(query)))
    admin = urlunsplit(parts._replace(query=urlencode(query)))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")  # pyright: ignore[reportArgumentType]
        conn.execute(
            f"ALTER DATABASE {name} SET default_transaction_isolation = 'repeatable read'"  # pyright: ignore[reportArgumentType]
        )
    try:
        with psycopg.connect(dsn) as conn:
            (level,) = conn.execute("SHOW default_transaction_isolation").fetchone() or ("",)
        assert level == "repeatable read"
        yield dsn
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # pyright: ignore[reportArgumentType]


@pytest.fixture
def rr_cluster(repeatable_read_dsn: str, tmp_path: Path) -> Iterator[Cluster]:
    dsn = repeatable_read_dsn
    with cluster(dsn, tmp_path, dict(os.environ), _worker_url(dsn)) as c:
        yield c


def test_a_repeatable_read_database_works_with_several_writers(rr_cluster: Cluster) -> None:
    scenario_many_writers(rr_cluster)


def test_a_repeatable_read_database_with_workers_racing_for_a_session(
    rr_cluster: Cluster,
) -> None:
    scenario_takeover_race(rr_cluster)


def test_connections_killed_again_and_again_during_calls(pg_cluster: Cluster) -> None:
    """A worker's connections are cut every 150 ms (15 cuts) while it runs steps.

    Whatever each call's fate: an error names the cut (the real cause), no effect
    happens twice, an effect that happened is never stored as not having happened,
    nothing stays ``started``, and the worker works once the cuts stop.
    """
    c = pg_cluster
    owner = c.spawn("owner", lease_seconds=5)
    session = owner.open()
    name = app_name(owner.name)
    stop = threading.Event()
    cuts = [0]

    def cut() -> None:
        # Until 15 connections were cut, not 15 tries: between two cuts the worker
        # connects again only when it next needs the store, later on a loaded machine
        # (CI once saw 4 of 15 tries land).
        for _ in range(200):
            if cuts[0] >= 15 or stop.wait(0.15):
                return
            rows = c.reader.rows(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?",
                (name,),
            )
            cuts[0] += sum(1 for (ok,) in rows if ok)

    cutter = threading.Thread(target=cut, daemon=True)
    cutter.start()
    errors: list[str] = []
    try:
        # Steps in batches until all the cuts are done, so every cut lands while it works
        # (the cutter gives up after 200 tries; batches are quick since steps commit once).
        for batch in range(2000):
            if not cutter.is_alive():
                break
            errors += owner.request("burst", rounds=3, prefix=f"k{batch}x")["errors"]
    finally:
        stop.set()
        cutter.join(timeout=60)
    # Read-only: a side-effecting call may rightly wait for an inspection after a failure.
    owner.call("final", effect="read_only")
    final = owner.outcome("final")
    # And a side-effecting one (ok, or blocked until an inspection): either is a write, so
    # anything the store kept in memory during the cuts has had its chance to be written.
    owner.call("finalw")
    finalw = owner.outcome("finalw")
    problems = _problems_after_cuts(c, session, errors)
    if final.get("outcome") != "ok":
        problems.append(f"the worker does not work after the cuts: {final}")
    if finalw.get("outcome") not in ("ok", "blocked"):
        problems.append(f"a side-effecting call after the cuts: {finalw}")
    if cuts[0] < 5:
        problems.append(f"only {cuts[0]} connections were cut (errors: {errors[:3]})")
    assert not problems, "\n".join(problems) + "\n" + owner.diagnostics()


def _problems_after_cuts(c: Cluster, session: str, errors: list[str]) -> list[str]:
    problems: list[str] = []
    raised = [e for e in errors if not e.startswith(("blocked", "error", "uncertain"))]
    masked = [e for e in raised if not re.search(r"lost|terminat|closed", e)]
    if masked:
        problems.append(f"{len(masked)} errors hide the cut, e.g. {masked[:3]}")
    rows = c.reader.calls(session)
    started = [r for r in rows if r["status"] == "started"]
    if started:
        problems.append(f"{len(started)} rows left started by a live worker: {started}")
    effects = c.effects()
    if not effects:
        problems.append("no call ran between the cuts")
    if len(effects) != len(set(effects)):
        problems.append(f"an effect happened twice: {effects}")
    by_tag: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_tag.setdefault(json.loads(str(r["arguments"]))["tag"], []).append(r)
    for tag in effects:
        # It ran: one row says so (ok) or says it may have (uncertain).
        outcomes = [r["outcome"] for r in by_tag.get(tag, [])]
        if outcomes not in (["ok"], ["uncertain"]):
            problems.append(f"{tag} ran; its rows: {by_tag.get(tag)}")
    for tag, tagged in by_tag.items():
        ok = any(r["outcome"] == "ok" for r in tagged)
        if "xw" in tag and ok and tag not in effects:
            problems.append(f"{tag} is ok in the store but never ran")
    return problems


def test_a_repeatable_read_database_hands_a_session_back_and_forth(rr_cluster: Cluster) -> None:
    scenario_ping_pong(rr_cluster)
