"""``git`` over SSH in ``proxy`` network mode: through the call's SOCKS5 proxy.

Zuno sets ``GIT_SSH_COMMAND`` to ``ssh`` with a ``ProxyCommand`` that asks the
call's proxy for the host (``zuno.execution.sandbox.egress._socks_connect``), so a clone
from an allowed ``host:22`` works and any other port or host is refused with
its reason in the result. The SSH server (``egress_ssh_server.py``) runs in a
network namespace made for the test, joined to the host by a veth pair on a
random /30 of 198.18.0.0/15 (the range set aside for network tests).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxed_shell import run_shell

pytestmark = pytest.mark.anyio

KINDS = ["bubblewrap", "landlock"]
SERVER = Path(__file__).parents[1] / "egress_ssh_server.py"


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def _bare_repository(root: Path) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    work = root.parent / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=env)
    (work / "hello.txt").write_text("hello over ssh\n")
    subprocess.run(["git", "-C", str(work), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "commit", "-qm", "one"], check=True, env=env)
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(work), str(root / "repo.git")], check=True, env=env
    )


@pytest.fixture
def ssh_host(tmp_path: Path) -> Iterator[str]:
    """The address of an SSH server on port 22 in a namespace of its own."""
    root = tmp_path / "git"
    root.mkdir()
    _bare_repository(root)
    server = subprocess.Popen(
        ["unshare", "-n", sys.executable, str(SERVER), str(root)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        net = (
            f"198.{18 + random.randrange(2)}.{random.randrange(256)}.{random.randrange(0, 256, 4)}"
        )
        base = net.rsplit(".", 1)[0] + "."
        last = int(net.rsplit(".", 1)[1])
        host_side, here, there = (
            f"zs{os.getpid() % 10**6}{last}",
            base + str(last + 1),
            base + str(last + 2),
        )
        _run(
            "ip",
            "link",
            "add",
            host_side,
            "type",
            "veth",
            "peer",
            "name",
            "zs0",
            "netns",
            str(server.pid),
        )
        _run("ip", "addr", "add", f"{here}/30", "dev", host_side)
        _run("ip", "link", "set", host_side, "up")
        inside = ["nsenter", "-t", str(server.pid), "-n", "ip"]
        _run(*inside, "addr", "add", f"{there}/30", "dev", "zs0")
        _run(*inside, "link", "set", "zs0", "up")
        yield there
    finally:
        server.kill()  # its namespace, and the veth pair with it, go away
        server.wait()


@pytest.mark.parametrize("kind", KINDS)
async def test_git_over_ssh_reaches_an_allowed_host_22_and_no_other_port(
    tmp_path: Path, ssh_host: str, kind: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    trust = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes"
    command = (
        f'export GIT_SSH_COMMAND="$GIT_SSH_COMMAND {trust} -o LogLevel=ERROR"; '
        f"git clone -q ssh://git@{ssh_host}/repo.git /tmp/clone && cat /tmp/clone/hello.txt; "
        f"git ls-remote ssh://git@{ssh_host}:2222/repo.git; echo exit $?"
    )
    result = await run_shell(
        workspace,
        tmp_path / "artifacts",
        command,
        kind=kind,
        network="proxy",
        network_allow=[f"{ssh_host}:22"],
    )
    assert "hello over ssh" in result.output, result.output
    assert result.data is not None
    rows = [(r["protocol"], r["port"], r["decision"]) for r in result.data["egress"]]
    assert rows == [("socks5", 22, "allowed"), ("socks5", 2222, "refused")]
    assert result.data["egress"][0]["bytes_down"] > 0
    assert f"[blocked network: {ssh_host}:2222 is not in sandbox.network_allow" in result.output
    assert "exit 128" in result.output
