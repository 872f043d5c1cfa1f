"""Project instructions: AGENTS.md (or CLAUDE.md) files reach the system prompt, nearest last.

The run is the real ``zuno run`` in a subprocess against the scripted model
server; what the model was sent is read from the server's recorded request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fake_api import FakeModelServer, Reply

from zuno.agent.instructions import MAX_FILE_BYTES, project_instructions
from zuno.config.loading import user_config_path

ZUNO = [sys.executable, "-m", "zuno"]


def _system_text(body: dict[str, Any]) -> str:
    first: dict[str, Any] = body["messages"][0]
    assert first["role"] == "system"
    content: Any = first["content"]
    return content if isinstance(content, str) else json.dumps(content)


def test_nested_instructions_reach_the_system_prompt_nearest_last(
    workspace: Path, tmp_path: Path, model_server: FakeModelServer
) -> None:
    user_folder = user_config_path().parent
    user_folder.mkdir(parents=True, exist_ok=True)
    (user_folder / "AGENTS.md").write_text("USER-RULE: answer in English.\n")
    (workspace / "AGENTS.md").write_text("ROOT-RULE: run pytest -q.\n")
    (workspace / "CLAUDE.md").write_text("ROOT-CLAUDE: must not be read.\n")
    deep = workspace / "pkg" / "deep"
    deep.mkdir(parents=True)
    (workspace / "pkg" / "CLAUDE.md").write_text("PKG-CLAUDE-RULE: no new dependencies.\n")
    (deep / "AGENTS.md").write_text("DEEP-RULE: keep functions short.\n")
    model_server.enqueue(Reply(text="Noted."))
    env = {
        **os.environ,
        "ZUNO_DB": str(tmp_path / "run.db"),
        "OPENAI_BASE_URL": model_server.openai_base_url,
        "OPENAI_API_KEY": "k",
    }
    run = [*ZUNO, "run", "hi", "--model", "openai:fake-model", "-w", str(workspace), "--json"]
    try:
        proc = subprocess.run(
            run,
            cwd=deep,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        (user_folder / "AGENTS.md").unlink()
    assert proc.returncode == 0, proc.stderr
    system = _system_text(model_server.requests[0].body)
    order = ["USER-RULE", "ROOT-RULE", "PKG-CLAUDE-RULE", "DEEP-RULE"]
    places = [system.index(marker) for marker in order]
    assert places == sorted(places)
    assert "ROOT-CLAUDE" not in system  # the folder has an AGENTS.md
    expected = [
        user_folder / "AGENTS.md",
        workspace / "AGENTS.md",
        workspace / "pkg" / "CLAUDE.md",
        deep / "AGENTS.md",
    ]
    for path in expected:
        assert str(path.resolve()) in system or str(path) in system

    # `zuno show` records which files the session was given.
    sid = json.loads(proc.stdout.splitlines()[0])["session_id"]
    shown = subprocess.run(
        [*ZUNO, "show", sid, "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    recorded = json.loads(shown.stdout)["instructions"]
    assert [Path(p).name for p in recorded] == ["AGENTS.md", "AGENTS.md", "CLAUDE.md", "AGENTS.md"]
    assert Path(recorded[-1]) == (deep / "AGENTS.md").resolve()
    plain = subprocess.run(
        [*ZUNO, "show", sid], env=env, capture_output=True, text=True, timeout=120
    )
    assert f"instructions {(deep / 'AGENTS.md').resolve()}" in plain.stdout


def test_the_project_root_is_the_git_folder_above_the_workspace(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "AGENTS.md").write_text("top\n")
    package = project / "src" / "package"
    package.mkdir(parents=True)
    (package / "AGENTS.md").write_text("package\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "AGENTS.md").write_text("not this project\n")
    files = project_instructions(package, here=elsewhere)  # outside: stop at the workspace
    assert [f.text.strip() for f in files] == ["top", "package"]


def test_a_long_file_is_cut_and_says_so(workspace: Path) -> None:
    (workspace / "AGENTS.md").write_text("x" * (MAX_FILE_BYTES + 10))
    (file,) = project_instructions(workspace, here=workspace)
    assert file.truncated and len(file.text) == MAX_FILE_BYTES


def test_no_files_no_section(workspace: Path) -> None:
    assert project_instructions(workspace, here=workspace) == []
