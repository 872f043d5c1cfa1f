"""Several workers, as processes in separate PID namespaces, sharing one SQLite file.

The same cases as ``tests/store_pg/test_pg_workers_multiproc.py`` where they
apply to a file on one machine: workers in other PID namespaces cannot be
looked up in this /proc, so their leases alone say whether they are alive.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "store_pg"))
from worker_harness import (
    Cluster,
    cluster,
    namespace_prefix,
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


@pytest.fixture
def lite_cluster(tmp_path: Path) -> Iterator[Cluster]:
    env = {**os.environ, "ZUNO_ARTIFACTS": str(tmp_path / "artifacts")}
    env.pop("ZUNO_DB", None)
    with cluster(str(tmp_path / "shared.db"), tmp_path, env) as c:
        yield c


def test_sqlite_a_paused_owner_is_settled_only_after_its_lease(lite_cluster: Cluster) -> None:
    scenario_paused_owner(lite_cluster)


def test_sqlite_a_paused_owners_job_is_lost_only_after_its_lease(lite_cluster: Cluster) -> None:
    scenario_paused_job_owner(lite_cluster)


def test_sqlite_a_killed_owner_is_settled_after_its_lease(lite_cluster: Cluster) -> None:
    scenario_killed_owner(lite_cluster)


def test_sqlite_a_late_result_never_overwrites(lite_cluster: Cluster) -> None:
    scenario_late_result(lite_cluster)


def test_sqlite_a_second_process_is_refused_then_takes_over(lite_cluster: Cluster) -> None:
    scenario_second_process(lite_cluster)


def test_sqlite_several_writers(lite_cluster: Cluster) -> None:
    scenario_many_writers(lite_cluster)


def test_sqlite_a_session_handed_back_and_forth_keeps_its_steps_apart(
    lite_cluster: Cluster,
) -> None:
    scenario_ping_pong(lite_cluster)


def test_sqlite_workers_racing_for_an_orphaned_session(lite_cluster: Cluster) -> None:
    scenario_takeover_race(lite_cluster)
