"""The ``skill`` tool through the dispatcher: discovery, precedence, loading."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from zuno.config.loading import Config
from zuno.core.declarations import READ_ONLY_SAFE_PARALLEL, BlockKind, Outcome
from zuno.policy.approvals import DenyAll
from zuno.session.runtime import Runtime
from zuno.tools.skill import MAX_LISTED_FILES, discover_skills, user_skills_dir

pytestmark = pytest.mark.anyio


def write_skill(root: Path, folder: str, front: str, body: str = "Do the thing.\n") -> Path:
    path = root / folder / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    return path


def skill_front(name: str, description: str) -> str:
    return f"name: {name}\ndescription: {description}\n"


def make_runtime(workspace: Path, tmp_path: Path) -> Runtime:
    # DenyAll: a skill call must never need an approval, even in strict mode.
    return Runtime(workspace, config=Config(), db_path=tmp_path / "zuno.db", approver=DenyAll())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository with the workspace one level down (skills may live in a parent)."""
    repo = tmp_path / "repo"
    ws = repo / "pkg"
    ws.mkdir(parents=True)
    return ws


async def test_lists_skills_from_every_convention_and_the_user_folder(
    project: Path, tmp_path: Path
) -> None:
    write_skill(project / ".zuno/skills", "alpha", skill_front("alpha", "First skill."))
    write_skill(project / ".agents/skills", "beta", skill_front("beta", "Second skill."))
    write_skill(project.parent / ".claude/skills", "gamma", skill_front("gamma", "From parent."))
    write_skill(user_skills_dir(), "delta", skill_front("delta", "Personal skill."))
    rt = make_runtime(project, tmp_path)
    result = await rt.call(rt.open_session(), "skill", {})
    assert result.outcome is Outcome.OK, result.output
    assert result.declaration == READ_ONLY_SAFE_PARALLEL
    assert result.data is not None
    names = [s["name"] for s in result.data["skills"]]
    assert names == ["alpha", "beta", "gamma", "delta"]
    assert "- alpha: First skill. (.zuno/skills/alpha/SKILL.md)" in result.output
    assert "Personal skill." in result.output
    assert result.data["warnings"] == []


async def test_nearest_skill_of_a_name_wins_with_a_warning(project: Path, tmp_path: Path) -> None:
    near = write_skill(project / ".claude/skills", "fmt", skill_front("fmt", "Near one."))
    far = write_skill(project.parent / ".zuno/skills", "fmt", skill_front("fmt", "Parent one."))
    user = write_skill(user_skills_dir(), "fmt", skill_front("fmt", "User one."))
    found = discover_skills(project)
    assert [s.path for s in found.skills] == [near]
    assert len(found.warnings) == 2
    assert str(far) in found.warnings[0] and str(near) in found.warnings[0]
    assert str(user) in found.warnings[1]

    rt = make_runtime(project, tmp_path)
    session = rt.open_session()
    listing = await rt.call(session, "skill", {})
    assert "Near one." in listing.output and "Parent one." not in listing.output
    assert "shadowed" in listing.output
    loaded = await rt.call(session, "skill", {"name": "fmt"})
    assert loaded.outcome is Outcome.OK
    assert loaded.data is not None and loaded.data["path"] == str(near)
    assert "shadowed" in loaded.output


async def test_in_one_folder_zuno_beats_agents_beats_claude(project: Path) -> None:
    write_skill(project / ".claude/skills", "x", skill_front("same", "claude"))
    write_skill(project / ".agents/skills", "x", skill_front("same", "agents"))
    write_skill(project / ".zuno/skills", "x", skill_front("same", "zuno"))
    found = discover_skills(project)
    assert [s.description for s in found.skills] == ["zuno"]
    assert len(found.warnings) == 2


async def test_broken_front_matter_is_a_warning_not_a_crash(project: Path, tmp_path: Path) -> None:
    skills = project / ".zuno/skills"
    write_skill(skills, "good", skill_front("good", "Works."))
    write_skill(skills, "badyaml", "name: [unclosed\ndescription: x\n")
    write_skill(skills, "noname", "description: Lacks a name.\n")
    write_skill(skills, "nodesc", "name: nodesc\n")
    write_skill(skills, "list", "- just\n- a list\n")
    (skills / "nofront").mkdir()
    (skills / "nofront" / "SKILL.md").write_text("# Just markdown\n")
    (skills / "unclosed").mkdir()
    (skills / "unclosed" / "SKILL.md").write_text("---\nname: u\ndescription: d\n")
    rt = make_runtime(project, tmp_path)
    result = await rt.call(rt.open_session(), "skill", {})
    assert result.outcome is Outcome.OK
    assert result.data is not None
    assert [s["name"] for s in result.data["skills"]] == ["good"]
    warnings: list[str] = result.data["warnings"]
    assert len(warnings) == 6
    joined = "\n".join(warnings)
    assert "not valid YAML" in joined
    assert "needs a `name`" in joined
    assert "needs a `description`" in joined
    assert "must be a YAML mapping" in joined
    assert "no front matter" in joined
    assert "not closed" in joined
    assert "Warnings:" in result.output


async def test_load_returns_body_and_files_beside_it(project: Path, tmp_path: Path) -> None:
    path = write_skill(
        project / ".zuno/skills",
        "release",
        skill_front("release", "Write release notes."),
        body="\n# Release notes\n\nRun scripts/log.sh first.\n",
    )
    (path.parent / "scripts").mkdir()
    (path.parent / "scripts" / "log.sh").write_text("git log\n")
    (path.parent / "template.md").write_text("T\n")
    rt = make_runtime(project, tmp_path)
    result = await rt.call(rt.open_session(), "skill", {"name": "release"})
    assert result.outcome is Outcome.OK, result.output
    assert "# Release notes\n\nRun scripts/log.sh first." in result.output
    assert "name: release" not in result.output  # the front matter is not the body
    assert "  scripts/log.sh" in result.output and "  template.md" in result.output
    assert result.data is not None
    assert result.data["files"] == [
        str(path.parent / "template.md"),
        str(path.parent / "scripts" / "log.sh"),
    ]
    assert result.data["folder"] == str(path.parent)


async def test_file_listing_is_bounded(project: Path) -> None:
    path = write_skill(project / ".zuno/skills", "big", skill_front("big", "Many files."))
    for i in range(MAX_LISTED_FILES + 5):
        (path.parent / f"f{i:04d}.txt").write_text("")
    from zuno.tools.skill import SkillArgs
    from zuno.tools.skill import _run as run_skill  # pyright: ignore[reportPrivateUsage]

    result = run_skill(SkillArgs(name="big"), project)
    assert result.data is not None
    assert len(result.data["files"]) == MAX_LISTED_FILES and result.data["files_cut"]
    assert f"first {MAX_LISTED_FILES} shown" in result.output


async def test_unknown_skill_names_the_available_ones(project: Path, tmp_path: Path) -> None:
    write_skill(project / ".zuno/skills", "deploy", skill_front("deploy", "Ship it."))
    rt = make_runtime(project, tmp_path)
    result = await rt.call(rt.open_session(), "skill", {"name": "deplyo"})
    assert result.outcome is Outcome.ERROR
    assert "no skill named 'deplyo'" in result.output
    assert "Did you mean: deploy?" in result.output


async def test_no_skills_says_where_to_put_them(project: Path, tmp_path: Path) -> None:
    rt = make_runtime(project, tmp_path)
    result = await rt.call(rt.open_session(), "skill", {})
    assert result.outcome is Outcome.OK
    assert result.output.startswith("No skills found.")
    assert ".zuno/skills" in result.output


@pytest.mark.parametrize("args", [{"name": ""}, {"name": 3}, {"action": "list"}])
async def test_bad_arguments_are_blocked(
    project: Path, tmp_path: Path, args: dict[str, Any]
) -> None:
    rt = make_runtime(project, tmp_path)
    result = await rt.call(rt.open_session(), "skill", args)
    assert result.outcome is Outcome.BLOCKED
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS


async def test_nested_groups_and_a_skills_own_subfolders(project: Path) -> None:
    skills = project / ".zuno/skills"
    write_skill(skills, "group/inner", skill_front("inner", "Grouped."))
    outer = write_skill(skills, "outer", skill_front("outer", "Has an example skill inside."))
    # A SKILL.md inside a skill's own folder is part of that skill, not another skill.
    write_skill(outer.parent, "examples/sub", skill_front("sub", "Example only."))
    found = discover_skills(project)
    assert sorted(s.name for s in found.skills) == ["inner", "outer"]


async def test_a_folder_reached_twice_is_searched_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real"
    write_skill(real / ".zuno/skills", "one", skill_front("one", "Once."))
    (real / "ws").mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    # The user folder is the workspace parent's .zuno, reached through a symlink.
    monkeypatch.setenv("ZUNO_CONFIG_HOME", str(link / ".zuno"))
    found = discover_skills(real / "ws")
    assert [s.name for s in found.skills] == ["one"]
    assert found.warnings == []  # not reported as shadowing itself
