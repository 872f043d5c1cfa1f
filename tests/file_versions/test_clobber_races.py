"""Writers in separate processes racing on one file, on SQLite and on PostgreSQL.

Each worker is a real process with its own Runtime and session on the shared
store (``fv_race_worker.py``). Two sessions that both read the same content and
both write: exactly one write lands, the others are refused and change nothing.
On PostgreSQL the test also sees the loser wait on the winner's lock of the
file's head row (``pg_stat_activity``), so the two writes really overlapped.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pg_schema import scratch_schema

sys.path.insert(0, str(Path(__file__).parent))
from fv_race_worker import Worker

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "race.db")
        return
    with scratch_schema(tmp_path, monkeypatch, prefix="zuno_fv") as dsn:
        yield dsn


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.close()


def _named(url: str, name: str) -> str:
    if not url.startswith("postgres"):
        return url
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


def _wait_until_waiting_on_a_lock(url: str, name: str) -> None:
    """Poll the server until the connection named ``name`` waits on a lock (bounded)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(2400):
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = %s AND wait_event_type = 'Lock'",
                (name,),
            ).fetchone()
            if row is not None and row[0] > 0:
                return
            time.sleep(0.05)
    raise AssertionError(f"{name} never waited on the head row's lock")


def test_the_second_of_two_overlapping_writers_is_refused(
    store_url: str, workspace: Path, workers: list[Worker]
) -> None:
    target = workspace / "f.txt"
    target.write_text("h1\n")
    b_name = f"fv_b_{uuid.uuid4().hex[:8]}"
    a = Worker(store_url, workspace, "a")
    workers.append(a)
    b = Worker(_named(store_url, b_name), workspace, "b")
    workers.append(b)
    assert a.ask(op="read", path="f.txt")["outcome"] == "ok"
    assert b.ask(op="read", path="f.txt")["outcome"] == "ok"

    # A has checked f.txt and holds its head; B writes meanwhile.
    assert a.ask(op="hold", path="f.txt", content="from a\n") == {"held": True}
    b.send(op="write", path="f.txt", content="from b\n")
    if store_url.startswith("postgres"):
        _wait_until_waiting_on_a_lock(store_url, b_name)
    assert target.read_text() == "h1\n"
    a.go()
    assert a.reply() == {"done": True}
    lost = b.reply()

    assert lost["outcome"] == "error", lost
    assert f"session {a.session} wrote it" in lost["output"]
    assert target.read_text() == "from a\n"


def test_of_three_writers_that_read_the_same_content_exactly_one_wins(
    store_url: str, workspace: Path, workers: list[Worker]
) -> None:
    target = workspace / "g.txt"
    for name in ("x", "y", "z"):
        workers.append(Worker(store_url, workspace, name))
    for round_no in range(2):
        target.write_text(f"round {round_no}\n")
        for worker in workers:
            assert worker.ask(op="read", path="g.txt")["outcome"] == "ok"
        for worker in workers:  # sent before any answer is read: the writes overlap
            worker.send(op="write", path="g.txt", content=f"{worker.name} in {round_no}\n")
        answers = {worker.name: worker.reply() for worker in workers}

        winners = [name for name, answer in answers.items() if answer["outcome"] == "ok"]
        assert len(winners) == 1, answers
        assert target.read_text() == f"{winners[0]} in {round_no}\n"
        for name, answer in answers.items():
            if name != winners[0]:
                assert answer["outcome"] == "error", answers
                assert "changed since this session last read it" in answer["output"]
