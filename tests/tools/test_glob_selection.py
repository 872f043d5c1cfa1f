"""The include glob of glob and grep against real rg: ignore files stay in force.

rg's own ``--glob`` would let ignored and hidden files through when the glob
matches them; these tests pin what the tools promise instead: the files rg
lists (ignore files, hidden rules) that the glob matches, the glob read with
rg's syntax. The oracle is rg itself: its plain listing, and ``--glob`` on a
tree with no ignore file at all, where the two readings agree.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zuno.execution.ripgrep import Query
from zuno.execution.ripgrep._locate import find_ripgrep
from zuno.execution.ripgrep._search import (
    RipgrepError,
    files_with_matches,
    list_files,
    search_lines,
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

FILES = [
    "a.py",
    "b.txt",
    ".dot.py",
    "src/m.py",
    "src/x_pb2.py",
    "src/keep_pb2.py",
    "src/gen/g.py",
    "src/deep/x/d.py",
    "src/.env.py",
    "src/sub/n.ts",
    "node_modules/pkg/i.py",
    ".hidden/h.py",
    "build/o.py",
    "debug.log",
    "docs/a/b.md",
    "x/src/f.py",
    "a/b",
    "aXb",
    "src/x:y.txt",
]

GITIGNORE = "node_modules/\nbuild/\n*_pb2.py\n!keep_pb2.py\n/src/gen/\n*.log\n"


def _rg(args: list[str], cwd: Path) -> set[str]:
    done = subprocess.run(
        [str(find_ripgrep().path), "--no-config", *args, "."],
        cwd=cwd,
        capture_output=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return {p.removeprefix("./") for p in done.stdout.decode().splitlines()}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("globsel") / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text(GITIGNORE)
    for name in FILES:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("token\n")
    return root


async def _listed(root: Path, glob: str, hidden: bool = False) -> list[str]:
    return (await list_files(root, glob=glob, hidden=hidden, limit=1000)).items


@pytest.mark.anyio
async def test_a_file_the_gitignore_whitelists_is_listed_only_when_the_glob_matches_it(
    repo: Path,
) -> None:
    # "!keep_pb2.py" in .gitignore once let that file into every glob's answer.
    assert await _listed(repo, "*.txt") == ["b.txt", "src/x:y.txt"]
    assert await _listed(repo, "*.md") == ["docs/a/b.md"]
    assert await _listed(repo, "nothing-is-called-this") == []
    assert await _listed(repo, "*_pb2.py") == ["src/keep_pb2.py"]


@pytest.mark.anyio
async def test_ignored_files_and_folders_stay_out_when_the_glob_matches_them(repo: Path) -> None:
    listed = await _listed(repo, "*.py")
    assert listed == ["a.py", "src/deep/x/d.py", "src/keep_pb2.py", "src/m.py", "x/src/f.py"]
    # rg --glob would walk the ignored src/gen/ here, and list src/x_pb2.py.
    assert await _listed(repo, "src/**") == [
        "src/deep/x/d.py",
        "src/keep_pb2.py",
        "src/m.py",
        "src/sub/n.ts",
        "src/x:y.txt",
    ]
    assert await _listed(repo, "*.log") == []
    assert await _listed(repo, "node_modules/**/*.py") == []


@pytest.mark.anyio
async def test_hidden_files_only_when_asked_and_never_dot_git(repo: Path) -> None:
    assert ".dot.py" not in await _listed(repo, "**/*.py")
    with_hidden = await _listed(repo, "**/*.py", hidden=True)
    assert {".dot.py", ".hidden/h.py", "src/.env.py"} <= set(with_hidden)
    assert not [p for p in await _listed(repo, "**", hidden=True) if p.startswith(".git/")]


@pytest.mark.anyio
async def test_anchors_prefixes_and_folder_only_globs(repo: Path) -> None:
    assert await _listed(repo, "/a.py") == ["a.py"]
    assert await _listed(repo, "**/src/*.py") == ["src/keep_pb2.py", "src/m.py", "x/src/f.py"]
    assert await _listed(repo, "src/*.py") == ["src/keep_pb2.py", "src/m.py"]
    assert await _listed(repo, "/**/d.py") == ["src/deep/x/d.py"]
    assert await _listed(repo, "src/**/*.{py,ts}") == [
        "src/deep/x/d.py",
        "src/keep_pb2.py",
        "src/m.py",
        "src/sub/n.ts",
    ]
    assert await _listed(repo, "src/") == []  # folders only: no file
    # ":" cannot be in an rg type's glob: the path check alone decides.
    assert await _listed(repo, "*:*.txt") == ["src/x:y.txt"]
    # A negated class matches "/" in rg, so the name part alone cannot decide.
    assert await _listed(repo, "a[!x]b") == ["a/b", "aXb"]


@pytest.mark.anyio
async def test_grep_include_counts_only_the_files_the_glob_matches(repo: Path) -> None:
    found = await search_lines(repo, Query("token", include="src/**/*.py"), limit=2)
    assert [line.path for line in found.items] == ["src/deep/x/d.py", "src/keep_pb2.py"]
    assert (found.total, found.files) == (3, 3)
    files = await files_with_matches(repo, Query("token", include="docs/**"), limit=10)
    assert files.items == ["docs/a/b.md"]


@pytest.mark.anyio
async def test_a_malformed_glob_is_refused_in_rgs_words(repo: Path) -> None:
    for glob in ("[", "src/[", "src/{a", "a/b\\"):
        with pytest.raises(RipgrepError, match="error parsing glob"):
            await list_files(repo, glob=glob, limit=10)


@pytest.mark.anyio
async def test_no_temporary_file_is_needed(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A read-only or missing temporary folder (a sandbox, a full disk) once broke every glob.
    monkeypatch.setattr(tempfile, "tempdir", str(repo / "no-such-folder"))
    assert await _listed(repo, "*.txt") == ["b.txt", "src/x:y.txt"]
    files = await files_with_matches(repo, Query("token", include="*.md"), limit=10)
    assert files.items == ["docs/a/b.md"]


# --------------------------------------------------------------- against rg itself

_PIECES = st.sampled_from(
    ["*", "**", "?", "a", "b", "py", ".", "/", ":", "[ab]", "[!a]", "{a,b}", "{py,ts}", "src", "x"]
)
_GLOBS = st.lists(_PIECES, min_size=1, max_size=5).map("".join)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(glob=_GLOBS, hidden=st.booleans())
def test_glob_is_rgs_listing_matched_by_rgs_glob(repo: Path, glob: str, hidden: bool) -> None:
    """What the glob lists = what rg lists, among what rg's --glob matches ignoring nothing."""
    hide = ["--hidden", "--glob", "!.git"] if hidden else []
    try:
        everything = _rg(["--files", "--no-ignore", "--hidden", "-g", "!.git", "-g", glob], repo)
    except AssertionError:
        return  # rg refuses the glob: covered above
    # In path order: folder by folder, as `rg --sort path` lists.
    expected = sorted(everything & _rg(["--files", *hide], repo), key=lambda p: p.split("/"))
    assert anyio.run(_listed, repo, glob, hidden) == expected
