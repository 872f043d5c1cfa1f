"""A watched snapshot is the previous tree plus the changed paths, written without git.

Each test compares what the watched path recorded with what git's own full
look records (a fresh object on a fresh store), counts the git processes a
one-file snapshot starts (none), and checks what the watched path hands on to
the next full look (another process on the same store). Large files are
recorded by size and hash, and undo says it cannot restore them; deny rules
hold against a workspace ``.gitignore`` that tries to take them back.
"""

from __future__ import annotations

import os
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from zuno.workspace.checkpoints.store import Checkpoints
from zuno.workspace.watch import FolderWatch

pytestmark = pytest.mark.skipif(
    FolderWatch.start(Path("/tmp")) is None, reason="inotify is not available here"
)


def sh(ws: Path, script: str) -> None:
    subprocess.run(["sh", "-ec", script], cwd=ws, check=True, timeout=60)


def take(cp: Checkpoints, n: int) -> str:
    return cp.take(call_id=f"call_{n}", tool="shell", session_id="ses").commit


def tree_of(cp: Checkpoints, commit: str) -> str:
    return cp._git("rev-parse", f"{commit}^{{tree}}").strip()  # pyright: ignore[reportPrivateUsage]


def files_of(cp: Checkpoints, commit: str) -> list[str]:
    return cp._git("ls-tree", "-r", "--name-only", commit).split("\n")[:-1]  # pyright: ignore[reportPrivateUsage]


def full_tree(tmp: Path, ws: Path, *, denied: list[str] | None = None) -> str:
    fresh = Checkpoints(tmp / f"full-{len(list(tmp.iterdir()))}", ws, denied=denied)
    try:
        return fresh.current_tree()
    finally:
        fresh.close()


def objects_hold(git_dir: Path, data: bytes) -> bool:
    for obj in (git_dir / "objects").rglob("*"):
        if (
            obj.is_file()
            and len(obj.parent.name) == 2
            and data in zlib.decompress(obj.read_bytes())
        ):
            return True
    return False


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    sh(
        ws,
        "mkdir -p src/deep docs; printf a > src/a.py; printf d > src/deep/d.py; printf r > docs/r",
    )
    return ws


@pytest.fixture
def stores(tmp_path: Path) -> Path:
    stores = tmp_path / "stores"
    stores.mkdir()
    return stores


@pytest.fixture
def git_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """Every git process the checkpoints start, by its arguments."""
    calls: list[list[str]] = []
    real = subprocess.run

    def counting(args: list[str], *rest: object, **kwargs: object) -> object:
        if args and args[0] == "git":
            calls.append([a for a in args if not a.startswith("-c") and "=" not in a])
        return real(args, *rest, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "run", counting)
    yield calls


def test_a_one_file_change_is_recorded_without_starting_git(
    ws: Path, stores: Path, git_calls: list[list[str]]
) -> None:
    cp = Checkpoints(stores / "watched", ws)
    take(cp, 0)
    git_calls.clear()
    sh(ws, "printf changed >> src/deep/d.py")
    commit = take(cp, 1)
    assert git_calls == []  # the blob, two trees on the way, the commit: written in Python
    sh(ws, "printf new > src/new.py")  # a new path: only the ignore rules are asked
    take(cp, 2)
    assert [c[1] for c in git_calls] == ["check-ignore"]
    assert tree_of(cp, commit) != tree_of(cp, take(cp, 3)) == full_tree(stores, ws)
    assert cp.changes(commit, cp.current_tree())[0].path == "src/new.py"
    cp.close()


def test_another_process_picks_up_what_the_watched_snapshots_recorded(
    ws: Path, stores: Path
) -> None:
    cp = Checkpoints(stores / "shared", ws)
    take(cp, 0)
    sh(ws, "printf b > src/b.py; rm docs/r; printf a2 >> src/a.py; chmod +x src/deep/d.py")
    watched = take(cp, 1)
    cp.close()
    # A new object (another process): its full look must start from the watched
    # snapshot's state, though git's index never saw those paths.
    other = Checkpoints(stores / "shared", ws)
    assert other.current_tree() == tree_of(other, watched) == full_tree(stores, ws)
    sh(ws, "printf a3 > src/a.py")
    assert tree_of(other, take(other, 2)) == full_tree(stores, ws)
    other.close()


def test_large_files_are_recorded_by_size_and_hash_and_not_restored(
    ws: Path, stores: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZUNO_CHECKPOINT_LARGE_FILE", "1000")
    big = b"B" * 5000
    (ws / "data.bin").write_bytes(big)
    cp = Checkpoints(stores / "watched", ws)
    first = take(cp, 0)  # the full look
    (ws / "data.bin").write_bytes(b"C" * 6000)
    (ws / "later.bin").write_bytes(b"L" * 3000)
    second = take(cp, 1)  # the watched path
    assert not objects_hold(cp.git_dir, big[:1000]) and not objects_hold(cp.git_dir, b"C" * 1000)
    assert not objects_hold(cp.git_dir, b"L" * 1000)
    assert {c.path for c in cp.changes(first, second)} == {"data.bin", "later.bin"}
    patch = cp.patch(first, second)
    assert "BBBB" not in patch and "CCCC" not in patch

    changes = cp.changes(cp.current_tree(), first)
    done = cp.restore({c.path: c.new for c in changes})
    assert done.too_large == ["data.bin"] and done.removed == ["later.bin"]
    assert (ws / "data.bin").read_bytes() == b"C" * 6000  # left as it is
    # A large file is found again by the full look of another object, unchanged.
    other = Checkpoints(stores / "watched", ws)
    assert other.current_tree() == cp.current_tree()
    other.close()
    cp.close()


def test_denied_paths_stay_out_even_when_a_gitignore_takes_them_back(
    ws: Path, stores: Path
) -> None:
    sh(
        ws,
        "mkdir secrets; printf top-secret > secrets/key;"
        "printf '!secrets/\\n!secrets/**\\n' > .gitignore",
    )
    cp = Checkpoints(stores / "watched", ws, denied=["secrets/**"])
    first = take(cp, 0)
    sh(
        ws,
        "printf more-secret > secrets/new; printf rotated-secret > secrets/key; printf x > src/x",
    )
    second = take(cp, 1)
    for commit in (first, second):
        assert not any(f.startswith("secrets") for f in files_of(cp, commit))
    for secret in (b"top-secret", b"more-secret", b"rotated-secret"):
        assert not objects_hold(cp.git_dir, secret)
    assert tree_of(cp, second) == full_tree(stores, ws, denied=["secrets/**"])
    cp.close()


def test_a_deny_rule_added_later_drops_what_was_recorded(ws: Path, stores: Path) -> None:
    sh(ws, "mkdir secrets; printf key > secrets/key")
    before = Checkpoints(stores / "shared", ws)
    first = take(before, 0)
    assert "secrets/key" in files_of(before, first)
    before.close()
    after = Checkpoints(stores / "shared", ws, denied=["secrets/**"])
    sh(ws, "printf more >> secrets/key")
    second = take(after, 1)
    assert "secrets/key" not in files_of(after, second)
    # Comparisons never show a denied path, whatever the older snapshots hold.
    assert all(not c.path.startswith("secrets") for c in after.changes(first, second))
    assert "secrets" not in after.patch(first, second)
    # An object made without rules (the undo tool's) uses the ones the store recorded.
    plain = Checkpoints(stores / "shared", ws)
    assert all(not c.path.startswith("secrets") for c in plain.changes(first, second))
    sh(ws, "printf again >> secrets/key")
    assert "secrets/key" not in files_of(plain, take(plain, 2))
    plain.close()
    after.close()


def test_the_first_look_runs_in_the_background(ws: Path, stores: Path) -> None:
    cp = Checkpoints(stores / "watched", ws)
    cp.prepare()
    cp.close()  # waits for it
    assert cp._watch is None  # pyright: ignore[reportPrivateUsage]
    cp = Checkpoints(stores / "watched", ws)
    cp.prepare()
    sh(ws, "printf changed >> src/a.py")
    commit = take(cp, 0)  # waits for the first look if it is still running
    assert tree_of(cp, commit) == full_tree(stores, ws)
    assert os.path.isdir(cp.git_dir)
    cp.close()


def test_a_quick_snapshot_leaves_what_it_cannot_do_at_once_to_take(ws: Path, stores: Path) -> None:
    cp = Checkpoints(stores / "watched", ws)
    assert cp.take_quick(call_id="c0", tool="write", session_id="s") is None  # no watch yet
    take(cp, 0)
    sh(ws, "printf q >> src/a.py")
    quick = cp.take_quick(call_id="c1", tool="write", session_id="s")
    assert quick is not None and tree_of(cp, quick.commit) == full_tree(stores, ws)
    # Too much to read at once: nothing recorded, the paths kept for take().
    sh(ws, "head -c 2000000 /dev/zero > src/big.bin && printf r >> docs/r")
    assert cp.take_quick(call_id="c2", tool="write", session_id="s") is None
    commit = take(cp, 2)
    assert {"src/big.bin", "docs/r"} <= set(files_of(cp, commit))
    assert tree_of(cp, commit) == full_tree(stores, ws)
    # Another process holds the store: not waited for.
    other = Checkpoints(stores / "watched", ws)
    sh(ws, "printf s >> src/a.py")
    with other._locked():  # pyright: ignore[reportPrivateUsage]
        assert cp.take_quick(call_id="c3", tool="write", session_id="s") is None
    assert tree_of(cp, take(cp, 3)) == full_tree(stores, ws)
    cp.close()


def test_a_store_of_the_earlier_layout_is_kept_and_made_private(ws: Path, stores: Path) -> None:
    cp = Checkpoints(stores / "old", ws)
    first = take(cp, 0)
    cp.close()
    # The config an earlier Zuno wrote: files named in the store, no private mode.
    from zuno.workspace.checkpoints.git import CONFIG

    earlier = CONFIG.replace("\tsharedRepository = 0600\n", "").format(
        none=cp.git_dir / "zuno-none"
    )
    (cp.git_dir / "config").write_text("[core]\n\trepositoryformatversion = 0\n" + earlier)
    (cp.git_dir / "config").chmod(0o644)
    again = Checkpoints(stores / "old", ws)
    sh(ws, "printf z >> src/a.py")
    second = take(again, 1)
    assert again.exists(first) and [c.path for c in again.changes(first, second)] == ["src/a.py"]
    assert (cp.git_dir / "config").stat().st_mode & 0o077 == 0
    again.close()


def test_a_store_removed_under_a_session_is_made_again(ws: Path, stores: Path) -> None:
    import shutil

    cp = Checkpoints(stores / "watched", ws)
    take(cp, 0)
    shutil.rmtree(cp.git_dir)
    sh(ws, "printf gone >> src/a.py")
    assert cp.take_quick(call_id="c1", tool="write", session_id="s") is None
    commit = take(cp, 1)
    assert tree_of(cp, commit) == full_tree(stores, ws)
    cp.close()


def test_a_snapshot_after_git_prune_removed_object_folders(
    ws: Path, stores: Path, tmp_path: Path, git_calls: list[list[str]]
) -> None:
    """Folders of loose objects that git removed (prune drops empty ones) are made again."""
    cp = Checkpoints(stores, ws)
    take(cp, 0)
    (ws / "src" / "a.py").write_text("first change\n")
    take(cp, 1)  # watched: this object knows the folders it wrote into
    # Another process packs every object and removes the loose ones and their folders.
    git = ["git", f"--git-dir={cp.git_dir}"]
    subprocess.run([*git, "repack", "-a", "-d", "-q"], check=True, timeout=60)
    subprocess.run([*git, "prune-packed"], check=True, timeout=60)
    for folder in (cp.git_dir / "objects").iterdir():
        if len(folder.name) == 2:
            for leftover in folder.iterdir():
                leftover.unlink()
            folder.rmdir()
    # Written again: its blob goes back into a folder this object had seen.
    (ws / "src" / "a.py").write_text("first change\n")
    git_calls.clear()
    commit = take(cp, 2)
    assert git_calls == []  # still the watched path: no full look
    assert cp._git("show", f"{commit}:src/a.py") == "first change\n"  # pyright: ignore[reportPrivateUsage]
    assert tree_of(cp, commit) == full_tree(tmp_path, ws)


def test_a_store_journal_inside_the_workspace_is_not_read(
    ws: Path, stores: Path, git_calls: list[list[str]]
) -> None:
    """The store's own journal, written on every call, starts no git process and is not copied."""
    cp = Checkpoints(stores, ws, exclude=[ws / "zuno.db"])
    take(cp, 0)
    git_calls.clear()
    (ws / "zuno.db-wal").write_bytes(b"journal bytes that must not be copied")
    sh(ws, "printf changed >> src/a.py")
    commit = take(cp, 1)
    assert git_calls == []  # no ignore check for the journal: it is known to be Zuno's
    assert "zuno.db-wal" not in files_of(cp, commit)
    assert not objects_hold(cp.git_dir, b"journal bytes that must not be copied")
