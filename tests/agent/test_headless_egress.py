"""The egress ledger seen from the command line: ``zuno run --json``'s ``call.settled``,
``zuno show`` (text and ``--json``) and ``zuno network suggest``.

A real scripted model server asks for one ``shell`` call that reaches a local
server through the proxy and is refused another host; everything is judged
from the commands' output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fake_api import FakeModelServer, Reply

from egress_servers import served
from zuno.config.trust import trust

ZUNO = [sys.executable, "-m", "zuno"]
MODEL = "openai:fake-model"
SIZE = 200_000


def _zuno(workspace: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ZUNO, *args],
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_ledger_reaches_run_json_show_and_suggest(
    workspace: Path, tmp_path: Path, model_server: FakeModelServer
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "blob").write_bytes(os.urandom(SIZE))
    config = {
        "permission": {"rules": [{"tool": "shell", "action": "allow"}]},
        "sandbox": {"network": "proxy", "network_allow": ["localhost", "127.0.0.1"]},
    }
    (workspace / "zuno.json").write_text(json.dumps(config))
    trust(workspace)
    env = {
        **os.environ,
        "ZUNO_DB": str(tmp_path / "run.db"),
        "OPENAI_BASE_URL": model_server.openai_base_url,
        "OPENAI_API_KEY": "k",
    }
    with served(site) as server:
        command = (
            f"curl -sS -o /dev/null http://localhost:{server.port}/blob; "
            "curl -sS http://registry.example.org/pkg"
        )
        model_server.enqueue(
            Reply(tool_calls=[("c1", "shell", json.dumps({"command": command}))]),
            Reply(text="Done."),
        )
        proc = _zuno(workspace, env, "run", "fetch", "--model", MODEL, "--json")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    (settled,) = [e for e in events if e["type"] == "call.settled"]
    egress: dict[str, Any] = settled["egress"]
    assert (egress["connections"], egress["refused"]) == (2, 1)
    assert abs(egress["bytes_down"] - SIZE) < SIZE / 100
    assert (
        "[blocked network: registry.example.org:80 is not in sandbox.network_allow"
        in (settled["result"])
    )
    sid = settled["session_id"]

    shown = json.loads(_zuno(workspace, env, "show", sid, "--json").stdout)
    (call,) = [c for c in shown["calls"] if c["tool"] == "shell"]
    assert [(r["host"], r["decision"]) for r in call["egress"]] == [
        ("localhost", "allowed"),
        ("registry.example.org", "refused"),
    ]
    text = _zuno(workspace, env, "show", sid).stdout
    assert "network: allowed http localhost:" in text
    assert "network: refused http registry.example.org:80" in text

    suggest = _zuno(workspace, env, "network", "suggest", sid)
    assert suggest.returncode == 0, suggest.stderr
    assert '"registry.example.org:80",  # refused 1x' in suggest.stdout
    as_json = json.loads(_zuno(workspace, env, "network", "suggest", "--json").stdout)
    assert as_json == {"rules": [{"entry": "registry.example.org:80", "refused": 1}]}
