"""Where a path argument really leads (zuno.workspace.real_paths), on a real file system, /proc."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zuno.workspace.real_paths import proc_refusal, real_path, touch


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    (root / "sub").mkdir(parents=True)
    (root / ".env").write_text("x\n")
    (root / "link").symlink_to(".env")
    (root / "dirlink").symlink_to("sub")
    (root / "loop").symlink_to("loop")
    (root / "up").symlink_to("..")
    return root


@pytest.mark.parametrize(
    ("given", "real"),
    [
        ("sub/../.env", ".env"),
        ("link", ".env"),
        ("dirlink/../.env", ".env"),  # ".." after a link applies to its target, as the kernel does
        ("sub/./../link", ".env"),
        (".", "."),
        ("missing/new.txt", "missing/new.txt"),
    ],
)
def test_relative_paths_resolve_like_the_kernel(ws: Path, given: str, real: str) -> None:
    assert touch(given, ws, writes=False).real == real


def test_absolute_spellings_of_one_file(ws: Path) -> None:
    for given in (f"/{ws}/.env", f"/proc/self/root{ws}/.env", f"{ws}//sub/..//.env"):
        path = touch(given, ws, writes=True)
        assert (path.real, path.inside, path.refusal) == (".env", True, None), given


def test_a_link_out_of_the_workspace_is_outside(ws: Path) -> None:
    path = touch("up/other", ws, writes=False)
    assert not path.inside and path.real == str(ws.parent / "other")
    assert path.subjects == (str(ws.parent / "other"), "up/other")


def test_a_symlink_loop_does_not_hang_or_raise(ws: Path) -> None:
    path = touch("loop/x", ws, writes=False)
    assert path.inside and path.refusal is None


def test_home_is_expanded(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(ws))
    assert touch("~/.env", ws, writes=False).real == ".env"


@pytest.mark.parametrize(
    "path",
    [
        "/proc/self/environ",
        "/proc/thread-self/environ",
        "/proc/{pid}/mem",  # this process's own number, filled in at run time
        "/proc/self/task/../cmdline",
        "/proc/self/maps",
        "/proc/self/fd/0",
        "/dev/fd/0",
        "/dev/stdin",
        "/proc/1/root/etc/hostname",
        "/proc/kcore",
    ],
)
def test_process_secrets_are_refused(path: str) -> None:
    # Test ids must not vary between processes (pytest-xdist compares collections).
    path = path.format(pid=os.getpid())
    assert real_path(path)[1] is not None


@pytest.mark.parametrize("path", ["/proc/self/status", "/proc/cpuinfo", "/etc/hostname", "/proc"])
def test_other_proc_files_are_not(path: str) -> None:
    assert real_path(path)[1] is None
    assert proc_refusal(os.path.realpath(path)) is None


def test_own_root_is_just_the_root() -> None:
    assert real_path(f"/proc/{os.getpid()}/root/etc/hostname") == (
        os.path.realpath("/etc/hostname"),
        None,
    )
