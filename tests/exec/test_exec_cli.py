"""Interactive processes through the real CLI: ``zuno batch`` runs several calls in
one process, so a prompt started by exec_command can be answered by write_stdin.

No --yes and no terminal: permission rules allow the calls. Judged by the answer
the program wrote to disk and by the processes left (none) after zuno exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from exec_harness import alive, exec_config, gone, new_marker

ZUNO = [sys.executable, "-m", "zuno"]

ASK = "\n".join(
    [
        'name = input("Name? ")',
        'print(f"Hello, {name}")',
        'open("answer.txt", "w").write(name + "\\n")',
        "",
    ]
)


@pytest.mark.parametrize("kind", ["bubblewrap", "landlock"])
def test_batch_answers_a_prompt_and_leaves_nothing_running(
    kind: str, workspace: Path, tmp_path: Path
) -> None:
    marker = new_marker()
    (workspace / "ask.py").write_text(ASK)
    rules = [
        {"tool": "exec_command", "pattern": "python3", "action": "allow"},
        {"tool": "write_stdin", "pattern": "*", "action": "allow"},
    ]
    config = Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"
    config.write_text(json.dumps(exec_config(kind, permission={"rules": rules})))
    batch = tmp_path / "batch.json"
    batch.write_text(
        json.dumps(
            [
                {"tool": "exec_command", "args": {"command": "python3 ask.py", "yield_ms": 30000}},
                {
                    "tool": "write_stdin",
                    "args": {"session": 1, "chars": "Grace\n", "yield_ms": 30000},
                },
                {
                    "tool": "exec_command",
                    "args": {
                        "command": f"python3 -c 'import time; time.sleep(1000)' {marker}",
                        "yield_ms": 0,
                    },
                },
            ]
        )
    )
    done = subprocess.run(
        [*ZUNO, "batch", str(batch), "--json"],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(tmp_path / "cli.db")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    asked, answered, left = json.loads(done.stdout)
    assert asked["outcome"] == "ok"
    assert asked["result"] == (
        "[process 1 is waiting for input: type with write_stdin session=1]\nName? "
    )
    assert answered["result"] == "[process 1 exited with code 0]\nGrace\nHello, Grace"
    assert (workspace / "answer.txt").read_text() == "Grace\n"
    assert left["result"].startswith("[process 2 is still running")
    # zuno did not wait for it (as it would for a background job): it killed it on exit.
    assert gone(marker)
    assert not alive(left["data"]["pid"])
