"""Claiming from the fleet's queue, through the Python API, with claimers racing for real.

Several threads, each with its own store connection (PostgreSQL, or one SQLite
file), claim until the queue is empty: each session must be claimed exactly
once (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite).
A running session is taken only when its owner's lease has expired.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from zuno.durability.store import Store, open_store
from zuno.durability.workers import WorkerIdentity, WorkerLease
from zuno.fleet.worker import Claim, claim_next, submit


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "claims.db")
    return str(request.getfixturevalue("pg_dsn"))


def _worker(n: int) -> WorkerIdentity:
    # Another host: only its lease can say it is alive (never this machine's /proc).
    return WorkerIdentity("fleet-test-host", "boot", "ns", 1000 + n, "1")


@pytest.fixture
def store(db: str) -> Iterator[Store]:
    s = open_store(db)
    try:
        yield s
    finally:
        s.close()


def test_racing_workers_claim_each_session_once(db: str, store: Store, tmp_path: Path) -> None:
    ids = [
        submit(store, f"task {n}", workspace=tmp_path, agent="build", model="openai:m")
        for n in range(24)
    ]
    claimed: dict[int, list[Claim]] = {}
    start = threading.Barrier(4)
    errors: list[BaseException] = []
    stores = [open_store(db) for _ in range(4)]
    # Leases live until every claimer is done: a stopped lease frees its sessions.
    leases = [WorkerLease(stores[n], _worker(n), lease_seconds=120) for n in range(4)]

    def claimer(n: int) -> None:
        try:
            start.wait(timeout=60)
            mine = claimed.setdefault(n, [])
            for _ in range(len(ids) + 1):  # bounded: never more claims than sessions
                claim = claim_next(stores[n], leases[n].worker_id)
                if claim is None:
                    return
                mine.append(claim)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        for lease, own in zip(leases, stores, strict=True):
            lease.stop()
            own.close()
    assert not errors, errors
    got = [c.session_id for claims in claimed.values() for c in claims]
    assert sorted(got) == sorted(ids), "a session was claimed twice or not at all"
    for n, claims in claimed.items():
        order = [ids.index(c.session_id) for c in claims]
        assert order == sorted(order), f"worker {n} did not take the oldest first"
    rows = store.query("SELECT session_id, owner, state FROM sessions")
    owners = {c.session_id: _worker(n).id for n, claims in claimed.items() for c in claims}
    assert {r[0]: (r[1], r[2]) for r in rows} == {s: (owners[s], "running") for s in ids}


def test_running_session_is_taken_only_after_its_owners_lease_expired(
    store: Store, tmp_path: Path
) -> None:
    session_id = submit(store, "task", workspace=tmp_path, agent="build", model="openai:m")
    first = WorkerLease(store, _worker(1), lease_seconds=120)
    second = WorkerLease(store, _worker(2), lease_seconds=120)
    try:
        claim = claim_next(store, first.worker_id)
        assert claim is not None and claim.taken_from is None
        assert claim_next(store, second.worker_id) is None  # its owner's lease is live
        with store.transaction() as tx:  # the first worker stops heartbeating: expired
            tx.execute(
                "UPDATE workers SET expires_at = zuno_now() - 1 WHERE worker_id = ?",
                (first.worker_id,),
            )
        first.stop()
        taken = claim_next(store, second.worker_id)
        assert taken is not None and taken.session_id == session_id
        assert taken.taken_from == first.worker_id
        assert claim_next(store, first.worker_id) is None  # now the second's
    finally:
        first.stop()
        second.stop()


def test_interactive_sessions_are_never_claimed(store: Store, tmp_path: Path) -> None:
    # A `zuno run` session (no submitted prompt) left running by a gone worker.
    record = store.create_session("ses_interactive", "build", str(tmp_path))
    with store.transaction() as tx:
        tx.execute(
            "UPDATE sessions SET state = 'running', owner = 'w1:gone:boot:ns:1:1'"
            " WHERE session_id = ?",
            (record.session_id,),
        )
    lease = WorkerLease(store, _worker(3), lease_seconds=120)
    try:
        assert claim_next(store, lease.worker_id) is None
    finally:
        lease.stop()
