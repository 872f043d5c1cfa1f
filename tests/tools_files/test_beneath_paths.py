"""zuno.workspace.beneath: resolving and writing beneath a root, with openat2 and with the walk."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from zuno.workspace.beneath import Beneath, EscapesRoot, openat2_available


@pytest.fixture(params=["openat2", "walk"])
def use_openat2(request: pytest.FixtureRequest) -> bool:
    if request.param == "openat2" and not openat2_available():
        pytest.skip("this kernel has no openat2")
    return request.param == "openat2"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    return root


@pytest.fixture
def root(ws: Path, use_openat2: bool) -> Iterator[Beneath]:
    with Beneath(ws, openat2=use_openat2) as opened:
        yield opened


def rel(text: str) -> PurePosixPath:
    return PurePosixPath(text)


def everything(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def test_creates_missing_folders_and_writes_atomically(ws: Path, root: Beneath) -> None:
    spot = root.locate(rel("a/b/c.txt"), create_folders=True)
    assert spot.stat is None
    spot.folder.replace_file(spot.name, b"hello\n", like=None)
    assert (ws / "a/b/c.txt").read_bytes() == b"hello\n"
    assert everything(ws) == ["a", "a/b", "a/b/c.txt"]


def test_missing_folder_without_create_is_not_found(root: Beneath) -> None:
    with pytest.raises(FileNotFoundError):
        root.locate(rel("nope/c.txt"))


def test_replacing_keeps_mode(ws: Path, root: Beneath) -> None:
    target = ws / "run.sh"
    target.write_text("old")
    target.chmod(0o751)
    spot = root.locate(rel("run.sh"))
    spot.folder.replace_file(spot.name, b"new", like=spot.stat)
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751


@pytest.mark.parametrize("link", ["real.txt", "./sub/../real.txt", "ABSOLUTE"])
def test_link_inside_is_followed_and_kept(ws: Path, root: Beneath, link: str) -> None:
    (ws / "sub").mkdir()
    (ws / "real.txt").write_text("old")
    text = str(ws / "real.txt") if link == "ABSOLUTE" else link
    (ws / "alias").symlink_to(text)
    spot = root.locate(rel("alias"))
    assert (spot.name, spot.followed) == ("real.txt", True)
    assert root.real_path(spot) == ws / "real.txt"
    spot.folder.replace_file(spot.name, b"new", like=spot.stat)
    assert (ws / "alias").is_symlink()
    assert (ws / "real.txt").read_text() == "new"


@pytest.mark.parametrize("absolute", [False, True])
def test_folder_link_inside_is_followed(ws: Path, root: Beneath, absolute: bool) -> None:
    (ws / "real").mkdir()
    # openat2's RESOLVE_BENEATH refuses any absolute link; the walk then decides.
    (ws / "dir").symlink_to(ws / "real" if absolute else "real")
    spot = root.locate(rel("dir/new.txt"), create_folders=True)
    spot.folder.replace_file(spot.name, b"x", like=None)
    assert (ws / "real/new.txt").read_bytes() == b"x"


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("up", "../outside/x.txt"),
        ("abs", "OUTSIDE/x.txt"),
        ("deep", "sub/../../outside/x.txt"),
        ("root-fs", "/etc/passwd"),
    ],
)
def test_file_link_leading_out_is_refused(ws: Path, root: Beneath, name: str, target: str) -> None:
    outside = ws.parent / "outside"
    (ws / "sub").mkdir()
    (ws / name).symlink_to(target.replace("OUTSIDE", str(outside)))
    with pytest.raises(EscapesRoot):
        root.locate(rel(name), create_folders=True)
    assert everything(outside) == []
    # Not following finds the link itself, which may be deleted.
    spot = root.locate(rel(name), follow_links=False)
    assert spot.stat is not None and stat.S_ISLNK(spot.stat.st_mode)


@pytest.mark.parametrize("target", ["../outside", "ABSOLUTE"])
def test_folder_link_leading_out_is_refused(ws: Path, root: Beneath, target: str) -> None:
    outside = ws.parent / "outside"
    (ws / "d").symlink_to(str(outside) if target == "ABSOLUTE" else target)
    for path in ("d/x.txt", "d/new/deeper/x.txt"):
        with pytest.raises(EscapesRoot):
            root.locate(rel(path), create_folders=True)
    assert everything(outside) == []


def test_dotdot_above_the_root_is_refused(root: Beneath) -> None:
    with pytest.raises(EscapesRoot):
        root.locate(rel("../outside/x.txt"), create_folders=True)


def test_magic_proc_links_are_not_a_way_out(ws: Path, root: Beneath) -> None:
    (ws / "me").symlink_to("/proc/self/root/etc/passwd")
    with pytest.raises(EscapesRoot):
        root.locate(rel("me"))


def test_link_loop_is_an_error_not_a_hang(ws: Path, root: Beneath) -> None:
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    with pytest.raises(OSError) as info:
        root.locate(rel("a"))
    assert info.value.errno == errno.ELOOP
    with pytest.raises(OSError):
        root.locate(rel("a/x.txt"))


def test_dangling_link_inside_creates_its_target(ws: Path, root: Beneath) -> None:
    (ws / "later").symlink_to("made/later.txt")
    spot = root.locate(rel("later"), create_folders=True)
    assert spot.stat is None
    spot.folder.replace_file(spot.name, b"x", like=None)
    assert (ws / "made/later.txt").read_bytes() == b"x"
    assert (ws / "later").is_symlink()


def test_read_refuses_special_files_without_blocking(ws: Path, root: Beneath) -> None:
    os.mkfifo(ws / "fifo")
    (ws / "file.txt").write_text("content")
    (ws / "link").symlink_to("file.txt")
    spot = root.locate(rel("fifo"))
    with pytest.raises(OSError, match="not a regular file"):
        spot.folder.read(spot.name)
    assert root.locate(rel("link")).folder.read("file.txt") == b"content"
    with pytest.raises(OSError):  # the folder API itself never follows a link
        spot.folder.read("link")


def test_failed_replace_leaves_no_temporary(ws: Path, root: Beneath) -> None:
    (ws / "dir").mkdir()
    (ws / "dir" / "keep").write_text("x")
    spot = root.locate(rel("dir"), follow_links=True)
    with pytest.raises(OSError):  # a file cannot be renamed over a folder
        spot.folder.replace_file(spot.name, b"data", like=None)
    assert everything(ws) == ["dir", "dir/keep"]


def test_leaving_by_an_error_removes_the_folders_it_made(ws: Path, use_openat2: bool) -> None:
    (ws / "old").mkdir()
    with pytest.raises(RuntimeError), Beneath(ws, openat2=use_openat2) as root:
        root.locate(rel("old/new/deeper/x.txt"), create_folders=True)
        assert (ws / "old/new/deeper").is_dir()
        raise RuntimeError("the write failed")
    assert everything(ws) == ["old"]


def test_a_folder_made_by_someone_else_is_kept(ws: Path, use_openat2: bool) -> None:
    with pytest.raises(RuntimeError), Beneath(ws, openat2=use_openat2) as root:
        root.locate(rel("new/x.txt"), create_folders=True)
        (ws / "new" / "theirs.txt").write_text("not ours")
        raise RuntimeError("the write failed")
    assert everything(ws) == ["new", "new/theirs.txt"]


def test_root_itself_is_a_folder(root: Beneath) -> None:
    with pytest.raises(IsADirectoryError):
        root.locate(rel("."))
