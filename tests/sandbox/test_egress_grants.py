"""Network grants in ``proxy`` mode, in their three scopes: a yes grants a command's
``network_hosts`` to that call only, "always" to every later command of the session,
and "always, keep it" also adds them to the user's ``sandbox.network_allow``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from egress_servers import Served, served
from zuno.cli.approvals import LearningApprover
from zuno.config.loading import Config, ConfigError, load_config
from zuno.contract.calls import CallResult
from zuno.policy.approvals import ApprovalDecision, ApprovalRequest, Approver, CallbackApprover
from zuno.policy.learned_rules import save_network_hosts
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

LOCAL = ["localhost", "127.0.0.1"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Served]:
    root = tmp_path / "www"
    root.mkdir()
    (root / "page").write_text("hello\n")
    with served(root) as state:
        yield state


def _runtime(workspace: Path, tmp_path: Path, approver: Approver) -> Runtime:
    config = Config.model_validate(
        {
            "sandbox": {"kind": "bubblewrap", "network": "proxy"},
            "permission": {"mode": "permissive"},
        }
    )
    return Runtime(workspace, config=config, db_path=tmp_path / "z.db", approver=approver)


def _get(server: Served, marker: str = "") -> str:
    return f"curl -sS -o /dev/null -w 'status %{{http_code}}{marker}\\n' http://localhost:{server.port}/page"


def _egress(result: CallResult) -> list[tuple[str, str | None]]:
    assert result.data is not None, result.output
    return [(r["decision"], r["rule"]) for r in result.data["egress"]]


async def test_a_session_grant_reaches_every_later_command_of_that_session_only(
    workspace: Path, tmp_path: Path, server: Served
) -> None:
    asked: list[ApprovalRequest] = []

    def always(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision.APPROVE_SESSION

    async with _runtime(workspace, tmp_path, CallbackApprover(always)) as rt:
        s = rt.open_session()
        first = await rt.call(s, "shell", {"command": _get(server), "network_hosts": LOCAL})
        later = await rt.call(s, "shell", {"command": _get(server, " later")})
        job = await rt.call(s, "shell", {"command": _get(server, " job"), "background": True})
        assert job.data is not None
        await rt.call(s, "bg", {"action": "wait", "job_id": job.data["job_id"], "timeout": 60})
        job_log = await rt.call(s, "bg", {"action": "output", "job_id": job.data["job_id"]})
        other = rt.open_session()
        elsewhere = await rt.call(other, "shell", {"command": _get(server, " elsewhere")})
    assert [r.network_hosts for r in asked] == [tuple(LOCAL)]
    assert "status 200" in first.output and "status 200 later" in later.output
    assert _egress(later) == [("allowed", "grant localhost + 127.0.0.1")]
    assert "status 200 job" in job_log.output, job_log.output
    # Another session of the same runtime was not granted anything.
    assert _egress(elsewhere) == [("refused", None)]
    assert "[blocked network: localhost:" in elsewhere.output
    assert server.requests == 3


async def test_a_yes_grants_the_hosts_to_that_call_only(
    workspace: Path, tmp_path: Path, server: Served
) -> None:
    async with _runtime(workspace, tmp_path, CallbackApprover(lambda r: True)) as rt:
        s = rt.open_session()
        first = await rt.call(s, "shell", {"command": _get(server), "network_hosts": LOCAL})
        after = await rt.call(s, "shell", {"command": _get(server, " after")})
    assert _egress(first) == [("allowed", "grant localhost + 127.0.0.1")]
    assert _egress(after) == [("refused", None)]
    assert server.requests == 1


async def test_always_and_keep_saves_the_hosts_to_the_users_network_allow(
    workspace: Path, tmp_path: Path, server: Served
) -> None:
    user_config = Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"
    user_config.parent.mkdir(parents=True, exist_ok=True)
    user_config.write_text(json.dumps({"sandbox": {"network_allow": ["@pypi"]}}))
    prompts: list[str] = []
    answers = ["a", "r"]

    def ask(prompt: str) -> str:
        prompts.append(prompt)
        return answers.pop(0)

    async with _runtime(workspace, tmp_path, LearningApprover(ask)) as rt:
        s = rt.open_session()
        first = await rt.call(s, "shell", {"command": _get(server), "network_hosts": LOCAL})
        later = await rt.call(s, "shell", {"command": _get(server, " later")})
    assert "[a]lways (reach localhost, 127.0.0.1 in this session or later)" in prompts[0]
    assert "[s] reaching localhost, 127.0.0.1, for every command of this session" in prompts[1]
    assert f"added to sandbox.network_allow in {user_config}" in prompts[1]
    assert "status 200" in first.output and "status 200 later" in later.output
    saved: dict[str, Any] = json.loads(user_config.read_text())
    assert saved["sandbox"]["network_allow"] == ["@pypi", *LOCAL]
    # A later session loads them from the user's configuration.
    assert load_config(workspace).sandbox.network_allow == ("@pypi", *LOCAL)


def test_saving_hosts_keeps_the_file_and_refuses_a_list_that_is_not_one(tmp_path: Path) -> None:
    path = tmp_path / "zuno.json"
    path.write_text(json.dumps({"model": "m", "sandbox": {"network": "proxy"}}))
    save_network_hosts(["a.test", "b.test:443"], path)
    save_network_hosts(["a.test"], path)
    assert json.loads(path.read_text()) == {
        "model": "m",
        "sandbox": {"network": "proxy", "network_allow": ["a.test", "b.test:443"]},
    }
    path.write_text(json.dumps({"sandbox": {"network_allow": "a.test"}}))
    with pytest.raises(ConfigError, match=r'"sandbox\.network_allow" is not a list'):
        save_network_hosts(["c.test"], path)
