"""The ``skill`` tool: discover and load reusable instructions (``SKILL.md`` files).

A skill is a folder holding a ``SKILL.md`` whose YAML front matter names it and
says what it is for::

    ---
    name: release-notes
    description: Write release notes from the git log since the last tag.
    ---
    (the instructions, in Markdown)

Skills are looked for in ``.zuno/skills/``, ``.agents/skills/`` and
``.claude/skills/`` of the workspace and of each of its parents, then in
``skills/`` of the user's config folder (``$ZUNO_CONFIG_HOME``, else the
platform's). That order is the precedence: when two skills share a name the
nearer one wins and the other is reported as shadowed, so a project can
override a personal skill without surprising anyone.

Discovery and loading only read files: ReadOnly / Safe / ParallelSafe.
"""

from __future__ import annotations

import difflib
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio.to_thread
import platformdirs
from pydantic import Field

from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from zuno.core.declarations import READ_ONLY_SAFE_PARALLEL

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_LISTED_FILES",
    "SKILL_DIRS",
    "SKILL_FILE",
    "Skill",
    "SkillArgs",
    "SkillDiscovery",
    "SkillTool",
    "discover_skills",
    "skill_roots",
    "user_skills_dir",
]

SKILL_FILE = "SKILL.md"
SKILL_DIRS = (".zuno/skills", ".agents/skills", ".claude/skills")
"""Where skills live in the workspace and each parent, nearest convention first."""
MAX_BODY_BYTES = 1 << 20
"""The most of a ``SKILL.md`` that loading reads; the rest is reported as cut."""
MAX_LISTED_FILES = 200
"""The most files beside a ``SKILL.md`` that loading lists."""
MAX_DESCRIPTION_CHARS = 500
"""Descriptions longer than this are shortened in the listing."""

_MAX_DEPTH = 3  # skills/<group>/<group>/<skill>/SKILL.md at most
_MAX_SKILLS_PER_ROOT = 500
_MAX_DIRS_PER_ROOT = 5000
_HEAD_BYTES = 64 * 1024  # front matter must fit here
_MAX_NAME_CHARS = 100
_SKIP = frozenset({".git", "node_modules", "__pycache__", ".venv", "venv"})


class SkillArgs(ToolArgs):
    """Arguments of ``skill``."""

    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_NAME_CHARS,
        description=(
            "The skill to load, as listed. Omit it to list the available skills "
            "(name, description and file of each)."
        ),
    )


@dataclass(frozen=True, slots=True)
class Skill:
    """One discovered skill.

    Attributes:
        name: The ``name`` of its front matter.
        description: The ``description`` of its front matter.
        path: The ``SKILL.md`` file.
        root: The skills folder it was found in.
    """

    name: str
    description: str
    path: Path
    root: Path

    @property
    def folder(self) -> Path:
        """The skill's folder (where the files beside ``SKILL.md`` live)."""
        return self.path.parent

    def as_dict(self) -> dict[str, str]:
        """The skill as plain strings, for JSON output."""
        return {
            "name": self.name,
            "description": self.description,
            "path": str(self.path),
            "root": str(self.root),
        }


@dataclass(slots=True)
class SkillDiscovery:
    """What discovery found: the winning skill of each name, and what went wrong."""

    skills: list[Skill] = field(default_factory=lambda: [])
    warnings: list[str] = field(default_factory=lambda: [])

    def get(self, name: str) -> Skill | None:
        """The skill called ``name``, if any."""
        for skill in self.skills:
            if skill.name == name:
                return skill
        return None


def user_skills_dir() -> Path:
    """``skills/`` in ``$ZUNO_CONFIG_HOME``, else in the platform's config folder for zuno."""
    home = os.environ.get("ZUNO_CONFIG_HOME")
    base = Path(home) if home else Path(platformdirs.user_config_dir("zuno"))
    return base / "skills"


def skill_roots(workspace: Path) -> list[Path]:
    """The folders searched for skills, in precedence order (nearest first)."""
    roots: list[Path] = []
    folder = Path(os.path.abspath(workspace))
    while True:
        roots.extend(folder / d for d in SKILL_DIRS)
        if folder.parent == folder:
            break
        folder = folder.parent
    user = user_skills_dir()
    if user not in roots:
        roots.append(user)
    return roots


def discover_skills(workspace: Path) -> SkillDiscovery:
    """Find every skill visible from ``workspace``; nearer skills shadow farther ones."""
    found = SkillDiscovery()
    seen: dict[str, Skill] = {}
    # The same folder reached twice (a symlinked parent) is searched once.
    visited: set[Path] = set()
    for root in skill_roots(workspace):
        if not root.is_dir():
            continue
        real = Path(os.path.realpath(root))
        if real in visited:
            continue
        visited.add(real)
        for path in _skill_files(root, found.warnings):
            skill = _parse_skill(path, root, found.warnings)
            if skill is None:
                continue
            winner = seen.get(skill.name)
            if winner is not None:
                found.warnings.append(
                    f"skill {skill.name!r} in {skill.path} is shadowed by the nearer "
                    f"{winner.path}; rename one to use both"
                )
                continue
            seen[skill.name] = skill
            found.skills.append(skill)
    return found


def _skill_files(root: Path, warnings: list[str]) -> list[Path]:
    """``SKILL.md`` files under ``root``, breadth first, sorted per level, bounded."""
    files: list[Path] = []
    queue: deque[tuple[Path, int]] = deque([(root, 0)])
    dirs = 0
    while queue:
        folder, depth = queue.popleft()
        dirs += 1
        if dirs > _MAX_DIRS_PER_ROOT or len(files) >= _MAX_SKILLS_PER_ROOT:
            warnings.append(
                f"stopped searching {root} after {len(files)} skills and {dirs - 1} folders; "
                "move unused skills elsewhere"
            )
            break
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        if depth > 0 and any(e.name == SKILL_FILE and e.is_file() for e in entries):
            # A skill's own subfolders (scripts, references) are not searched for skills.
            files.append(folder / SKILL_FILE)
            continue
        if depth >= _MAX_DEPTH:
            continue
        for entry in entries:
            if entry.name in _SKIP or entry.name.startswith("."):
                continue
            try:
                if entry.is_dir():
                    queue.append((Path(entry.path), depth + 1))
            except OSError:
                continue
    return files


def _parse_skill(path: Path, root: Path, warnings: list[str]) -> Skill | None:
    """The skill of one ``SKILL.md``, or None with a warning saying what to fix."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
    except OSError as exc:
        warnings.append(f"{path}: cannot be read ({exc.strerror or exc})")
        return None
    text = head.decode("utf-8", "replace")
    try:
        meta, _ = _split_front_matter(text)
    except ValueError as exc:
        warnings.append(f"{path}: {exc}")
        return None
    name = meta.get("name")
    description = meta.get("description")
    if not isinstance(name, str) or not name.strip():
        warnings.append(f"{path}: the front matter needs a `name` (a non-empty string)")
        return None
    name = name.strip()
    if len(name) > _MAX_NAME_CHARS or "\n" in name:
        warnings.append(f"{path}: `name` must be one line of at most {_MAX_NAME_CHARS} characters")
        return None
    if not isinstance(description, str) or not description.strip():
        warnings.append(f"{path}: the front matter needs a `description` (a non-empty string)")
        return None
    return Skill(name, " ".join(description.split()), path, root)


def _split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """The YAML front matter as a mapping, and the body after it.

    Raises:
        ValueError: When there is no front matter or it is not a YAML mapping.
    """
    import yaml  # imported on use: slow to import

    text = text.removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise ValueError("no front matter: the file must start with a '---' line")
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            block = "".join(lines[1:i])
            body = "".join(lines[i + 1 :])
            break
    else:
        raise ValueError(
            f"the front matter is not closed by a '---' line (within the first {_HEAD_BYTES} bytes)"
        )
    try:
        meta = yaml.safe_load(block)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 2}" if where is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ValueError(f"the front matter is not valid YAML{line}: {problem}") from None
    if not isinstance(meta, dict):
        raise ValueError("the front matter must be a YAML mapping with `name` and `description`")
    mapping = cast(dict[Any, Any], meta)
    return {str(k): v for k, v in mapping.items()}, body


def _sibling_files(skill: Skill) -> tuple[list[str], bool]:
    """Files in the skill's folder other than ``SKILL.md`` (relative, sorted), and whether cut."""
    folder = skill.folder
    out: list[str] = []
    queue: deque[Path] = deque([folder])
    while queue:
        current = queue.popleft()
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name in _SKIP:
                continue
            path = Path(entry.path)
            try:
                # Symlinked folders are listed, not entered: they can loop.
                if entry.is_dir(follow_symlinks=False):
                    queue.append(path)
                    continue
            except OSError:
                continue
            if current == folder and entry.name == SKILL_FILE:
                continue
            if len(out) >= MAX_LISTED_FILES:
                return out, True
            out.append(path.relative_to(folder).as_posix())
    return out, False


def _load(skill: Skill) -> ToolResult:
    try:
        with open(skill.path, "rb") as f:
            data = f.read(MAX_BODY_BYTES + 1)
    except OSError as exc:
        raise ToolError(f"cannot read {skill.path}: {exc.strerror or exc}") from None
    cut = len(data) > MAX_BODY_BYTES
    text = data[:MAX_BODY_BYTES].decode("utf-8", "replace")
    try:
        _, body = _split_front_matter(text)
    except ValueError as exc:  # changed since it was listed
        raise ToolError(f"{skill.path}: {exc}") from None
    files, files_cut = _sibling_files(skill)
    parts = [
        f"Skill: {skill.name}",
        f"Description: {skill.description}",
        f"Folder: {skill.folder}",
    ]
    if files:
        more = f", first {MAX_LISTED_FILES} shown" if files_cut else ""
        parts.append(f"Files beside {SKILL_FILE} (relative to the folder{more}):")
        parts.extend(f"  {name}" for name in files)
    else:
        parts.append(f"No other files beside {SKILL_FILE}.")
    parts.append("")
    parts.append(body.strip("\n"))
    if cut:
        parts.append(f"[{SKILL_FILE} is larger than {MAX_BODY_BYTES} bytes; the rest was not read]")
    return ToolResult(
        output="\n".join(parts),
        data={
            **skill.as_dict(),
            "folder": str(skill.folder),
            "files": [str(skill.folder / name) for name in files],
            "files_cut": files_cut,
            "body_cut": cut,
        },
    )


def _listing(found: SkillDiscovery, workspace: Path) -> ToolResult:
    lines: list[str] = []
    if found.skills:
        lines.append(
            f"{len(found.skills)} skill(s). Load one with the skill tool and its name "
            "before following it:"
        )
        for skill in found.skills:
            description = skill.description
            if len(description) > MAX_DESCRIPTION_CHARS:
                description = description[: MAX_DESCRIPTION_CHARS - 3] + "..."
            lines.append(f"- {skill.name}: {description} ({_shown(skill.path, workspace)})")
    else:
        lines.append(
            "No skills found. Skills are folders with a SKILL.md under "
            + ", ".join(SKILL_DIRS)
            + f" of the workspace or a parent, or under {user_skills_dir()}."
        )
    if found.warnings:
        lines.append("Warnings:")
        lines.extend(f"- {w}" for w in found.warnings)
    return ToolResult(
        output="\n".join(lines),
        data={
            "skills": [s.as_dict() for s in found.skills],
            "warnings": list(found.warnings),
        },
    )


def _shown(path: Path, workspace: Path) -> str:
    try:
        return path.relative_to(workspace).as_posix()
    except ValueError:
        return str(path)


def _run(args: SkillArgs, workspace: Path) -> ToolResult:
    found = discover_skills(workspace)
    if args.name is None:
        return _listing(found, workspace)
    skill = found.get(args.name.strip())
    if skill is None:
        names = [s.name for s in found.skills]
        close = difflib.get_close_matches(args.name, names, n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        known = ", ".join(names) if names else "none"
        raise ToolError(
            f"no skill named {args.name!r}.{hint} Available skills: {known}. "
            "Call skill without a name to list them with their descriptions."
        )
    result = _load(skill)
    shadowing = [w for w in found.warnings if w.startswith(f"skill {skill.name!r} ")]
    if shadowing:
        result.output += "\n\n[Note: " + "; ".join(shadowing) + "]"
    return result


class SkillTool(Tool[SkillArgs]):
    """List the available skills, or load one."""

    name = "skill"
    description = (
        "Skills are reusable instructions kept as SKILL.md files. Without arguments, list "
        "the available skills (name and description). With name, load that skill: its "
        f"instructions and the paths of up to {MAX_LISTED_FILES} files beside it (scripts, "
        "references; read them with read when the instructions say so). Searched in "
        ".zuno/skills, .agents/skills and .claude/skills of the workspace and its parents, "
        "then the user's config folder; the nearest skill of a name wins. Read-only."
    )
    args_model = SkillArgs
    declaration = READ_ONLY_SAFE_PARALLEL
    rule_argument = "name"
    rule_match = "glob"

    async def run(self, args: SkillArgs, ctx: ToolContext) -> ToolResult:
        """List the skills, or load the one named by ``args.name``."""
        # Folder walks block; a thread keeps the loop free, and abandoning it
        # on cancel is harmless because nothing is changed.
        return await anyio.to_thread.run_sync(_run, args, ctx.workspace, abandon_on_cancel=True)
