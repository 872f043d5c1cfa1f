"""Codex's apply_patch scenarios, each through ``zuno call apply_patch`` with no prior read.

The cases (``tests/fixtures/codex_apply_patch``, Apache-2.0, from openai/codex)
give an input tree, a patch and the tree Codex leaves. A person at the
terminal calls the tool directly, in a fresh workspace that no session has
read: update hunks are anchored on the file's lines, and a person's direct
call is never refused for want of a read, so every case ends as Codex's does.
Case 015 is the exception by design: Codex keeps the first file of a patch
that fails part-way; Zuno applies a patch all or nothing.

``tests/fixtures/zuno_apply_patch_extra`` holds cases of our own in the same
layout (lone carriage returns, written from the description of Codex's 024,
which we could not reach); they run the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CASES = Path(__file__).parent.parent / "fixtures" / "codex_apply_patch"
OURS = Path(__file__).parent.parent / "fixtures" / "zuno_apply_patch_extra"
ZUNO = str(Path(sys.executable).with_name("zuno"))
ATOMIC = "015_failure_after_partial_success_leaves_changes"
"""Codex applies this one part-way; Zuno refuses it whole."""


def _tree(root: Path) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _cases(root: Path = CASES) -> list[str]:
    return sorted(p.name for p in root.iterdir() if (p / "patch.txt").is_file())


def test_the_cases_are_all_here() -> None:
    assert len(_cases()) == 23  # 001-022 (two numbered 020); 023-025 were not available
    assert "Apache License" in (CASES / "README.md").read_text()


@pytest.mark.parametrize("case", _cases())
def test_codex_scenario(case: str, tmp_path: Path) -> None:
    _run_case(CASES / case, tmp_path)


def test_our_own_cases_are_here_and_say_they_are_ours() -> None:
    assert [c[:3] for c in _cases(OURS)] == ["024"] * 4
    readme = (OURS / "README.md").read_text()
    assert "not Codex's" in readme and "`one\\r\\ntwo\\rthree\\nfour\\r\\n`" in readme
    assert b"two\rthree" in (OURS / "024_lone_cr_update" / "input" / "mixed.txt").read_bytes()


@pytest.mark.parametrize("case", _cases(OURS))
def test_our_own_scenario(case: str, tmp_path: Path) -> None:
    _run_case(OURS / case, tmp_path)


def _run_case(folder: Path, tmp_path: Path) -> None:
    case = folder.name
    ws = tmp_path / "ws"
    if (folder / "input").is_dir():
        shutil.copytree(folder / "input", ws)
    else:
        ws.mkdir()
    before = _tree(ws)
    patch = (folder / "patch.txt").read_text(encoding="utf-8")

    proc = subprocess.run(
        [ZUNO, "call", "apply_patch", json.dumps({"patch": patch}), "--yes", "--json"],
        cwd=ws,
        env={**os.environ, "ZUNO_DB": str(tmp_path / "zuno.db")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    result = json.loads(proc.stdout)

    expected = before if case == ATOMIC else _tree(folder / "expected")
    assert _tree(ws) == expected, (result["outcome"], result["result"])
    if case == ATOMIC or expected == before:
        # A patch Codex rejects (or applies only in part) is refused whole, with a reason.
        assert result["outcome"] != "ok", result
        assert "has not read it" not in str(result["result"])  # refused for its content
    else:
        assert result["outcome"] == "ok", result
        assert proc.returncode == 0
