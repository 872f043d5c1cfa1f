"""The shadow git store itself: snapshots restore byte for byte, and touch nothing they should not.

The property test builds small random trees (bytes, executable bits, symlinks,
dangling ones included, nested folders), changes them at random, and checks
that restoring the first checkpoint gives back exactly the first tree.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zuno.workspace.checkpoints.store import Checkpoints, checkpoints_for


def tree(root: Path) -> dict[str, tuple[str, bytes | str, bool]]:
    """Every file and symlink under root (``.git`` aside): kind, content or target, exec bit."""
    found: dict[str, tuple[str, bytes | str, bool]] = {}
    for folder, dirs, files in os.walk(root):
        links = [d for d in dirs if os.path.islink(Path(folder, d))]
        dirs[:] = [d for d in dirs if d != ".git" and d not in links]
        for name in files + links:
            p = Path(folder, name)
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                found[rel] = ("link", os.readlink(p), False)
            else:
                found[rel] = ("file", p.read_bytes(), bool(p.stat().st_mode & stat.S_IXUSR))
    return found


def undo_to(cp: Checkpoints, commit: str) -> None:
    """Restore the whole workspace to ``commit`` (what ``undo --to`` does)."""
    current = cp.current_tree()
    cp.restore({c.path: c.new for c in cp.changes(current, commit)})


# Small trees: names from a tiny alphabet so changes collide with existing paths.
names = st.sampled_from(["a", "b", "c", "d.txt", "e f", "ü"])
paths = st.lists(names, min_size=1, max_size=3).map("/".join)
content = st.binary(max_size=64)
node = st.one_of(
    st.tuples(st.just("file"), content, st.booleans()),
    st.tuples(st.just("link"), st.sampled_from(["a", "../a", "missing", "b/c", "/etc/hostname"])),
)
trees = st.dictionaries(paths, node, max_size=8)


def build(root: Path, spec: dict[str, tuple[object, ...]], *, clear: bool = False) -> None:
    """Lay spec out under root.

    clear: what is in the way goes (a file where a folder is wanted, a folder
    where a file is), as a command might do; else such a path is skipped.
    """
    for rel, item in sorted(spec.items()):
        p = root / rel
        try:
            if clear:
                for parent in reversed(p.relative_to(root).parents[:-1]):
                    q = root / parent
                    if q.is_symlink() or q.is_file():
                        q.unlink()
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
            p.parent.mkdir(parents=True, exist_ok=True)
            if p.is_symlink() or p.is_file():
                p.unlink()
            elif p.is_dir():
                continue
            if item[0] == "file":
                p.write_bytes(item[1])  # type: ignore[arg-type]
                p.chmod(0o755 if item[2] else 0o644)
            else:
                p.symlink_to(str(item[1]))
        except OSError:  # a folder in the way, a symlink loop on the path
            continue


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(first=trees, second=trees, removed=st.lists(paths, max_size=3))
@example(  # a symlink to restore where folders holding only empty folders now stand
    first={"a": ("link", "a")},
    second={"a": ("link", "a"), "a/a/a": ("link", "a")},
    removed=["a/a/a"],
)
def test_undo_restores_the_tree_byte_for_byte(
    first: dict[str, tuple[object, ...]],
    second: dict[str, tuple[object, ...]],
    removed: list[str],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp, "ws")
        ws.mkdir()
        build(ws, first)
        expected = tree(ws)
        cp = checkpoints_for(Path(tmp, "artifacts"), ws)
        before = cp.take(call_id="call_1", tool="shell", session_id="ses_1").commit
        # What a command might do: overwrite, retype, chmod, delete, add.
        build(ws, second, clear=True)
        for rel in removed:
            p = ws / rel
            if p.is_symlink() or p.is_file():
                p.unlink()
        changed = tree(ws)
        after = cp.take(call_id="call_2", tool="undo", session_id="ses_1").commit
        undo_to(cp, before)
        assert tree(ws) == expected
        undo_to(cp, after)  # and the undo undone: the changed tree, exactly
        assert tree(ws) == changed


def test_the_users_repository_is_never_touched(workspace: Path, tmp_path: Path) -> None:
    git = ["git", "-C", str(workspace)]
    subprocess.run([*git, "init", "-q"], check=True)
    (workspace / "tracked.txt").write_text("one\n")
    subprocess.run([*git, "add", "tracked.txt"], check=True)
    subprocess.run(
        [*git, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"], check=True
    )
    (workspace / "staged.txt").write_text("staged\n")
    subprocess.run([*git, "add", "staged.txt"], check=True)
    fingerprint = _folder_digest(workspace / ".git")

    cp = checkpoints_for(tmp_path / "artifacts", workspace)
    first = cp.take(call_id="c1", tool="shell", session_id="s").commit
    (workspace / "tracked.txt").write_text("two\n")
    (workspace / "new.txt").write_text("new\n")
    second = cp.take(call_id="c2", tool="shell", session_id="s").commit
    changed = {c.path for c in cp.changes(first, second)}
    undo_to(cp, first)

    assert changed == {"tracked.txt", "new.txt"}  # nothing of .git is in a checkpoint
    assert (workspace / "tracked.txt").read_text() == "one\n"
    assert _folder_digest(workspace / ".git") == fingerprint  # index, HEAD, objects: same bytes
    assert cp.git_dir.parent == tmp_path / "artifacts" / "checkpoints"


def test_ignored_files_and_the_store_inside_the_workspace_are_left_alone(
    workspace: Path,
) -> None:
    (workspace / ".gitignore").write_text("build/\n")
    (workspace / "build").mkdir()
    (workspace / "build" / "out.bin").write_bytes(b"old")
    artifacts = workspace / "zuno-artifacts"
    cp = checkpoints_for(artifacts, workspace, also_exclude=[workspace / "zuno.db"])
    (workspace / "zuno.db").write_bytes(b"store before")
    first = cp.take(call_id="c1", tool="shell", session_id="s").commit
    (workspace / "build" / "out.bin").write_bytes(b"new")
    (workspace / "zuno.db").write_bytes(b"store after")
    (workspace / "zuno.db-wal").write_bytes(b"wal")
    (workspace / "src.py").write_text("print()\n")
    second = cp.take(call_id="c2", tool="shell", session_id="s").commit

    assert [c.path for c in cp.changes(first, second)] == ["src.py"]
    undo_to(cp, first)
    assert not (workspace / "src.py").exists()
    assert (workspace / "build" / "out.bin").read_bytes() == b"new"  # ignored: not covered
    assert (workspace / "zuno.db").read_bytes() == b"store after"
    assert (workspace / "zuno.db-wal").exists()
    assert cp.git_dir.is_dir()


def test_the_users_git_setup_does_not_leak_in(workspace: Path, tmp_path: Path) -> None:
    # A .gitattributes asking for line-ending conversion, and a GIT_DIR in the
    # environment (as inside a git hook): the checkpoint keeps the exact bytes, in its own store.
    (workspace / ".gitattributes").write_text("* text=auto eol=crlf\n")
    (workspace / "dos.txt").write_bytes(b"a\r\nb\n")
    elsewhere = tmp_path / "elsewhere.git"
    subprocess.run(["git", "init", "-q", "--bare", str(elsewhere)], check=True)
    before = _folder_digest(elsewhere)
    old = os.environ.get("GIT_DIR")
    os.environ["GIT_DIR"] = str(elsewhere)
    try:
        cp = checkpoints_for(tmp_path / "artifacts", workspace)
        first = cp.take(call_id="c1", tool="write", session_id="s").commit
        (workspace / "dos.txt").write_bytes(b"changed")
        undo_to(cp, first)
    finally:
        if old is None:
            del os.environ["GIT_DIR"]
        else:
            os.environ["GIT_DIR"] = old
    assert (workspace / "dos.txt").read_bytes() == b"a\r\nb\n"
    assert _folder_digest(elsewhere) == before


def _folder_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            p = Path(folder, name)
            digest.update(p.relative_to(root).as_posix().encode() + b"\0")
            digest.update(p.read_bytes() + b"\0" + oct(p.stat().st_mode).encode())
    return digest.hexdigest()


def test_a_first_snapshot_of_many_files_round_trips(workspace: Path, tmp_path: Path) -> None:
    # More new paths than one update-index batch takes: the bulk path.
    for i in range(620):
        folder = workspace / f"d{i // 50}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i}").write_bytes(bytes([i % 256]) * (i % 7))
    (workspace / "d0" / "f1").chmod(0o755)
    (workspace / "link").symlink_to("d0/f1")
    expected = tree(workspace)
    cp = checkpoints_for(tmp_path / "artifacts", workspace)
    first = cp.take(call_id="c1", tool="shell", session_id="s").commit
    for i in range(0, 620, 3):
        (workspace / f"d{i // 50}" / f"f{i}").unlink()
    (workspace / "d3" / "extra").write_text("x")
    undo_to(cp, first)
    assert tree(workspace) == expected
