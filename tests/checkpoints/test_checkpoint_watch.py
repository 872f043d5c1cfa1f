"""Snapshots after the first one in a process look only at the paths inotify reported.

Each test changes the workspace through a real shell between two snapshots of
the same :class:`Checkpoints` object (the watched path), then compares the tree
with the one a fresh object writes (the full look, into its own store): they
must be equal, or undo would restore the wrong bytes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from zuno.workspace.checkpoints.store import Checkpoints
from zuno.workspace.watch import FolderWatch

pytestmark = pytest.mark.skipif(
    FolderWatch.start(Path("/tmp")) is None, reason="inotify is not available here"
)


def sh(ws: Path, script: str) -> None:
    subprocess.run(["sh", "-ec", script], cwd=ws, check=True, timeout=60)


def full_tree(tmp: Path, ws: Path) -> str:
    """The tree a fresh object (first snapshot in its store: the full look) writes."""
    fresh = Checkpoints(tmp / f"full-{len(list(tmp.iterdir()))}", ws)
    try:
        return fresh.current_tree()
    finally:
        fresh.close()


def tree_of(cp: Checkpoints, commit: str) -> str:
    return cp._git("rev-parse", f"{commit}^{{tree}}").strip()  # pyright: ignore[reportPrivateUsage]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    sh(
        ws,
        "mkdir -p a/b c keep gone; printf one > a/one.txt; printf two > a/b/two.txt;"
        "printf x > c/x; printf k > keep/k; printf g > gone/g;"
        "printf 'junk/\\n*.log\\n' > .gitignore;"
        "ln -s a/one.txt link",
    )
    return ws


@pytest.fixture
def stores(tmp_path: Path) -> Path:
    stores = tmp_path / "stores"
    stores.mkdir()
    return stores


def take(cp: Checkpoints, n: int) -> str:
    return cp.take(call_id=f"call_{n}", tool="shell", session_id="ses").commit


def test_every_kind_of_shell_change_reaches_the_next_snapshot(ws: Path, stores: Path) -> None:
    cp = Checkpoints(stores / "watched", ws)
    commit = take(cp, 0)
    assert cp._watch is not None  # pyright: ignore[reportPrivateUsage]
    scripts = [
        "printf new > a/new.txt",  # create
        "printf more >> a/one.txt",  # modify
        "chmod +x c/x",  # mode
        "rm a/b/two.txt",  # delete
        "mv c/x c/y",  # rename
        "mkdir -p fresh/deep/er && printf f > fresh/deep/er/f && printf g > fresh/g",
        # inside a new folder, now watched
        "printf in-new >> fresh/deep/er/f && printf h > fresh/deep/h",
        "ln -s ../keep/k a/to-k && ln -sfn c/y link",  # symlinks: new, retargeted
        "rm -r gone",  # a folder removed
        "mv keep kept && printf k2 > kept/k2",  # a folder moved, then written into
        "printf x > a/one.txt && rm a/one.txt && mkdir a/one.txt && printf y > a/one.txt/z",
        "printf ignored > junk.log && mkdir -p junk && printf j > junk/j",  # ignored
        "mkdir -p out && mv a/b out/ && printf q > out/b/q",  # moved into a new folder
    ]
    for i, script in enumerate(scripts, start=1):
        sh(ws, script)
        commit = take(cp, i)
        assert cp._index_seen is not None, script  # pyright: ignore[reportPrivateUsage]
        assert tree_of(cp, commit) == full_tree(stores, ws), script
    files = cp._git("ls-tree", "-r", "--name-only", commit).split()  # pyright: ignore[reportPrivateUsage]
    assert "junk.log" not in files and "junk/j" not in files
    assert "fresh/deep/er/f" in files and "kept/k2" in files and "a/one.txt/z" in files
    cp.close()


def test_nothing_changed_gives_the_same_tree(ws: Path, stores: Path) -> None:
    cp = Checkpoints(stores / "watched", ws)
    first = take(cp, 0)
    second = take(cp, 1)
    assert tree_of(cp, first) == tree_of(cp, second) == full_tree(stores, ws)
    cp.close()


def test_a_gitignore_change_takes_the_full_look(ws: Path, stores: Path) -> None:
    cp = Checkpoints(stores / "watched", ws)
    sh(ws, "printf j > junk.log")
    take(cp, 0)
    sh(ws, "printf 'junk/\\n' > .gitignore")  # junk.log, untouched, is no longer ignored
    commit = take(cp, 1)
    files = cp._git("ls-tree", "-r", "--name-only", commit).split()  # pyright: ignore[reportPrivateUsage]
    assert "junk.log" in files
    assert tree_of(cp, commit) == full_tree(stores, ws)
    cp.close()


def test_a_nested_repository_appearing_takes_the_full_look(ws: Path, stores: Path) -> None:
    cp = Checkpoints(stores / "watched", ws)
    take(cp, 0)
    # The full look from the same index (a fresh store would differ: a folder
    # already recorded as files stays so), by a new object on a copy of the store.
    shutil.copytree(stores / "watched", stores / "copy")
    sh(
        ws,
        "git init -q c && git -C c -c user.name=u -c user.email=u@x commit -q --allow-empty -m m",
    )
    commit = take(cp, 1)
    copy = Checkpoints(stores / "copy", ws)
    assert tree_of(cp, commit) == copy.current_tree()
    copy.close()
    cp.close()


def test_without_the_watch_the_full_look_gives_the_same_tree(ws: Path, stores: Path) -> None:
    cp = Checkpoints(stores / "watched", ws)
    take(cp, 0)
    cp.close()  # the fallback: no events known, the whole workspace is looked at
    sh(ws, "printf more >> a/one.txt && rm c/x && chmod +x a/b/two.txt")
    commit = take(cp, 1)
    assert tree_of(cp, commit) == full_tree(stores, ws)
    assert cp._watch is not None  # pyright: ignore[reportPrivateUsage]
    sh(ws, "printf again >> a/one.txt")
    assert tree_of(cp, take(cp, 2)) == full_tree(stores, ws)
    cp.close()


def test_a_snapshot_by_another_object_makes_the_next_one_look_at_all(
    ws: Path, stores: Path
) -> None:
    cp = Checkpoints(stores / "shared", ws)
    other = Checkpoints(stores / "shared", ws)
    take(cp, 0)
    sh(ws, "printf one-more >> a/one.txt")
    take(other, 1)  # another process's snapshot: the chain and the index moved
    other.close()
    # The other object staged a/one.txt; this object's queue still holds it, and its
    # own snapshot sees that the chain moved (the full look).
    sh(ws, "printf z > c/z")
    commit = take(cp, 2)
    assert tree_of(cp, commit) == full_tree(stores, ws)
    cp.close()


def test_a_lost_event_queue_makes_the_next_snapshot_look_at_all(ws: Path, stores: Path) -> None:
    cp = Checkpoints(stores / "watched", ws)
    take(cp, 0)
    watch = cp._watch  # pyright: ignore[reportPrivateUsage]
    assert watch is not None
    watch.close()  # as after an overflow: drain() can no longer answer
    assert watch.drain() is None
    sh(ws, "printf more >> a/one.txt && mkdir n && printf n > n/n")
    assert tree_of(cp, take(cp, 1)) == full_tree(stores, ws)
    cp.close()


def test_the_store_inside_the_workspace_stays_out(ws: Path) -> None:
    from zuno.workspace.checkpoints.store import checkpoints_for

    cp = checkpoints_for(ws / ".zuno", ws, also_exclude=[ws / "state.db"])
    take(cp, 0)
    sh(ws, "printf db > state.db && printf w > state.db-wal && printf more >> a/one.txt")
    commit = take(cp, 1)
    files = cp._git("ls-tree", "-r", "--name-only", commit).split()  # pyright: ignore[reportPrivateUsage]
    assert "a/one.txt" in files
    assert not [f for f in files if f.startswith((".zuno", "state.db"))]
    cp.close()
