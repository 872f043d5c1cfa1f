"""Rules follow the file, not the name (issue 25, item 7), through the real CLI.

A hard link is a second name for the same file: a deny rule on ``secrets/**`` must
keep ``read`` and ``grep`` from the file's content under any other name. Zuno cannot
list a file's other names cheaply, so under a deny rule with a wildcard a regular file
with more than one link is not read (and ``grep`` leaves it out); under deny rules
that all name one path exactly, the file is refused only when it is one of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ZUNO = str(Path(sys.executable).with_name("zuno"))
SECRET = "hunter2-" + "linked"


def _call(ws: Path, home: Path, tool: str, args: dict[str, Any]) -> tuple[int, str]:
    env = {**os.environ, "ZUNO_CONFIG_HOME": str(home), "ZUNO_DB": str(home / "z.db")}
    proc = subprocess.run(
        [ZUNO, "call", tool, json.dumps(args), "--json", "-w", str(ws)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _setup(tmp_path: Path, pattern: str) -> tuple[Path, Path]:
    home = tmp_path / "home"
    home.mkdir()
    rules = [{"tool": "read", "pattern": pattern, "action": "deny"}]
    (home / "zuno.json").write_text(json.dumps({"permission": {"rules": rules}}))
    ws = tmp_path / "ws"
    (ws / "secrets").mkdir(parents=True)
    (ws / "secrets" / "key").write_text(f"token = {SECRET}\n")
    (ws / ".env").write_text(f"TOKEN={SECRET}\n")
    return ws, home


def test_a_hard_link_to_a_file_under_a_denied_folder_is_not_read(tmp_path: Path) -> None:
    ws, home = _setup(tmp_path, "secrets/**")
    os.link(ws / "secrets" / "key", ws / "notes.txt")
    (ws / "plain.txt").write_text("nothing to hide\n")
    code, out = _call(ws, home, "read", {"path": "notes.txt"})
    assert code != 0 and SECRET not in out, out
    assert "hard link" in out  # the refusal says why
    for args in ({"pattern": "hunter2"}, {"pattern": "hunter2", "path": "notes.txt"}):
        code, out = _call(ws, home, "grep", args)
        assert SECRET not in out, out
    # A file with one name is read as before.
    code, out = _call(ws, home, "read", {"path": "plain.txt"})
    assert code == 0 and "nothing to hide" in out, out


def test_exact_deny_rules_refuse_only_links_to_the_denied_file(tmp_path: Path) -> None:
    ws, home = _setup(tmp_path, ".env")
    (ws / "secrets" / "key").unlink()  # only .env is denied here
    os.link(ws / ".env", ws / "config.txt")
    (ws / "a.txt").write_text("shared text\n")
    os.link(ws / "a.txt", ws / "b.txt")
    code, out = _call(ws, home, "read", {"path": "config.txt"})
    assert code != 0 and SECRET not in out, out
    code, out = _call(ws, home, "grep", {"pattern": "hunter2|shared"})
    assert SECRET not in out and "shared text" in out, out
    # Two names, neither denied: nothing to refuse.
    code, out = _call(ws, home, "read", {"path": "b.txt"})
    assert code == 0 and "shared text" in out, out
