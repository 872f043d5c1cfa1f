"""``sandbox.network = "proxy"``: the only way out of a call's namespace is its own proxy.

Every server is local (127.0.0.1 on the host); the sandboxed command runs in
its own network namespace, so the host's loopback is "outside" for it and is
reachable only through the proxy, as ``localhost`` with ``127.0.0.1`` allowed.
Run under bubblewrap and Landlock.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from egress_servers import Served, served
from sandboxed_shell import run_shell
from zuno.config.loading import Config
from zuno.contract.tool import ToolResult
from zuno.core.declarations import Outcome
from zuno.policy.approvals import ApprovalRequest, CallbackApprover
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

KINDS = ["bubblewrap", "landlock"]
LOCAL = ["localhost", "127.0.0.1"]
BLOB = 1_000_000


@dataclass
class Box:
    workspace: Path
    artifacts: Path
    server: Served

    async def run(self, command: str, kind: str, **settings: Any) -> ToolResult:
        settings.setdefault("network_allow", LOCAL)
        return await run_shell(
            self.workspace, self.artifacts, command, kind=kind, network="proxy", **settings
        )

    def url(self, path: str) -> str:
        return f"http://localhost:{self.server.port}/{path}"


def _wheel(index: Path) -> None:
    """A pip "simple" index holding one tiny pure-Python wheel."""
    folder = index / "simple" / "tinypkg"
    folder.mkdir(parents=True)
    name = "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(folder / name, "w") as z:
        z.writestr("tinypkg/__init__.py", "VALUE = 42\n")
        info = "tinypkg-1.0.dist-info/"
        z.writestr(info + "METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
        z.writestr(
            info + "WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(info + "RECORD", "")
    (folder / "index.html").write_text(f'<html><body><a href="{name}">{name}</a></body></html>')


def _git_repo(root: Path) -> None:
    """A bare repository served over git's dumb HTTP protocol (static files)."""
    work = root.parent / "git-work"
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=env)
    (work / "hello.txt").write_text("hello from git\n")
    subprocess.run(["git", "-C", str(work), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "commit", "-qm", "one"], check=True, env=env)
    bare = root / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True, env=env)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True, env=env)


@pytest.fixture(scope="module")
def www(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("www") / "site"
    root.mkdir()
    (root / "blob").write_bytes(os.urandom(BLOB))
    _wheel(root)
    _git_repo(root)
    return root


@pytest.fixture
def box(tmp_path: Path, www: Path) -> Iterator[Box]:
    ws = tmp_path / "ws"
    ws.mkdir()
    with served(www) as server:
        yield Box(ws, tmp_path / "artifacts", server)


def _ledger(result: ToolResult) -> list[dict[str, Any]]:
    assert result.data is not None
    return result.data["egress"]


def _close(measured: int, expected: int) -> bool:
    return abs(measured - expected) <= expected / 100


@pytest.mark.parametrize("kind", KINDS)
async def test_curl_reaches_an_allowed_host_and_the_ledger_counts_its_bytes(
    box: Box, kind: str
) -> None:
    upload = 300_000
    command = (
        f"curl -sS -o /dev/null -w '%{{size_download}}\\n' {box.url('blob')} && "
        f"head -c {upload} /dev/zero > /tmp/up && curl -sS -p -T /tmp/up {box.url('up')} && "
        "curl -sS -x socks5h://127.0.0.1:3128 -o /dev/null "
        f"-w '%{{http_code}}\\n' {box.url('blob')}"
    )
    result = await box.run(command, kind)
    assert f"{BLOB}\n" in result.output and "200" in result.output, result.output
    rows = _ledger(result)
    assert [(r["protocol"], r["decision"], r["host"]) for r in rows] == [
        ("http", "allowed", "localhost"),
        ("connect", "allowed", "localhost"),
        ("socks5", "allowed", "localhost"),
    ]
    assert all(r["address"] == "127.0.0.1" and r["port"] == box.server.port for r in rows)
    assert _close(rows[0]["bytes_down"], BLOB) and _close(rows[2]["bytes_down"], BLOB)
    assert box.server.uploaded == upload and _close(rows[1]["bytes_up"], upload)
    assert rows[0]["bytes_up"] < 1000  # a request, no body


@pytest.mark.parametrize("kind", KINDS)
async def test_pip_and_git_reach_a_local_index_and_repository(box: Box, kind: str) -> None:
    index = box.url("simple")
    command = (
        f"python3 -m pip download -q --no-deps --disable-pip-version-check --no-cache-dir "
        f"--trusted-host localhost --index-url {index} -d /tmp/dl tinypkg && ls /tmp/dl && "
        f"git clone -q {box.url('repo.git')} /tmp/clone && cat /tmp/clone/hello.txt"
    )
    result = await box.run(command, kind, timeout_default=120)
    assert "tinypkg-1.0-py3-none-any.whl" in result.output, result.output
    assert "hello from git" in result.output, result.output
    assert all(r["decision"] == "allowed" for r in _ledger(result))


@pytest.mark.parametrize("kind", KINDS)
async def test_a_denied_host_is_refused_and_the_reason_reaches_the_model(
    box: Box, kind: str
) -> None:
    result = await box.run(
        f"curl -sS -o /dev/null -w '%{{http_code}}\\n' http://registry.example.org/x; "
        f"curl -sS -o /dev/null -w '%{{http_code}}\\n' {box.url('blob')}",
        kind,
        network_allow=[*LOCAL, "*.example.org"],
        network_deny=["localhost"],
    )
    rows = _ledger(result)
    assert [r["decision"] for r in rows] == ["failed", "refused"] or [
        r["decision"] for r in rows
    ] == ["refused", "refused"]
    assert rows[1]["rule"] == "localhost"
    assert "[blocked network: localhost:" in result.output
    assert "denied by sandbox.network_deny (localhost)" in result.output
    assert box.server.requests == 0


@pytest.mark.parametrize("kind", KINDS)
async def test_a_name_resolving_to_loopback_is_refused_unless_the_address_is_allowed(
    box: Box, kind: str
) -> None:
    result = await box.run(
        f"curl -sS {box.url('blob')} -o /dev/null", kind, network_allow=["localhost"]
    )
    (row,) = _ledger(result)
    assert row["decision"] == "refused" and row["address"] in ("127.0.0.1", "::1")
    assert "a loopback, private or link-local address" in result.output
    assert box.server.requests == 0


@pytest.mark.parametrize("kind", KINDS)
async def test_a_command_ignoring_the_proxy_reaches_nothing(box: Box, kind: str) -> None:
    script = (
        "import socket\n"
        f"for addr in [('127.0.0.1', {box.server.port}), ('10.255.255.1', 80), ('1.1.1.1', 53)]:\n"
        "    s = socket.socket()\n"
        "    s.settimeout(3)\n"
        "    try:\n"
        "        s.connect(addr); print('REACHED', addr)\n"
        "    except OSError as e:\n"
        "        print('no', addr, e.errno)\n"
    )
    result = await box.run(f'python3 -c "{script}"', kind)
    assert "REACHED" not in result.output and result.output.count("no (") == 3, result.output
    assert _ledger(result) == [] and box.server.requests == 0


@pytest.mark.parametrize("kind", KINDS)
async def test_a_call_cannot_use_another_calls_proxy_and_grants_stay_with_their_call(
    box: Box, kind: str
) -> None:
    """Call A (granted localhost) and call B (not granted) run at the same time: B's
    connections to the proxy port land on B's own proxy, under B's rules."""
    ws = box.workspace
    wait = "for i in $(seq 400); do [ -e {0} ] && break; sleep 0.05; done"
    get = f"curl -sS -o /dev/null -w '%{{http_code}}\\n' {box.url('blob')}"
    results: dict[str, ToolResult] = {}

    async def call(name: str, command: str, grants: list[str]) -> None:
        results[name] = await run_shell(
            ws,
            box.artifacts,
            command,
            kind=kind,
            network="proxy",
            extra={"network_grants": grants},
        )

    no_grants: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "a", f"{get}; touch a-done; {wait.format('b-done')}", LOCAL)
        tg.start_soon(call, "b", f"{wait.format('a-done')}; {get}; touch b-done", no_grants)
    a, b = _ledger(results["a"]), _ledger(results["b"])
    assert [r["decision"] for r in a] == ["allowed"] and a[0]["rule"].startswith("grant ")
    assert [r["decision"] for r in b] == ["refused"]
    assert "is not in sandbox.network_allow" in results["b"].output
    # The next call, with no grant, is refused too: the grant was for call A only.
    after = await run_shell(ws, box.artifacts, get, kind=kind, network="proxy")
    assert [r["decision"] for r in _ledger(after)] == ["refused"]
    assert box.server.requests == 1


@pytest.mark.parametrize("approved", [True, False])
async def test_network_hosts_are_asked_and_granted_to_that_call_only(
    box: Box, tmp_path: Path, approved: bool
) -> None:
    """Through the runtime: a call naming ``network_hosts`` is put to the person even in
    permissive mode; a yes grants them to that call, and the next call is refused."""
    asked: list[str] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request.reason)
        return approved

    sandbox = {"kind": "bubblewrap", "network": "proxy"}
    config = Config.model_validate({"sandbox": sandbox, "permission": {"mode": "permissive"}})
    get = f"curl -sS -o /dev/null -w '%{{http_code}}\\n' {box.url('blob')}"
    runtime = Runtime(
        box.workspace, config=config, db_path=tmp_path / "z.db", approver=CallbackApprover(approve)
    )
    async with runtime as rt:
        s = rt.open_session()
        granted = await rt.call(s, "shell", {"command": get, "network_hosts": LOCAL})
        after = await rt.call(s, "shell", {"command": get})
        finished = [e.data for e in rt.store.events(s.session_id) if e.kind == "call.finished"]
    assert asked == [
        "it asks to reach localhost, 127.0.0.1, not in sandbox.network_allow "
        "(yes: for this call only)"
    ]
    assert "[blocked network: localhost:" in after.output
    if approved:
        assert "200" in granted.output and box.server.requests == 1
        assert [r["decision"] for r in finished[0]["egress"]] == ["allowed"]
    else:
        assert granted.outcome is Outcome.BLOCKED and box.server.requests == 0
    assert [r["decision"] for r in finished[-1]["egress"]] == ["refused"]
