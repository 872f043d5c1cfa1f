"""zuno.execution.ripgrep against the real rg: locating, decoding, ordering, limits, cancelling."""

from __future__ import annotations

import itertools
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import anyio
import anyio.from_thread
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zuno.execution import ripgrep
from zuno.execution.ripgrep import Query
from zuno.execution.ripgrep._locate import RipgrepUnavailable, find_ripgrep, parse_version
from zuno.execution.ripgrep._search import (
    FileCount,
    RipgrepError,
    _Smallest,  # pyright: ignore[reportPrivateUsage]
    count_matches,
    files_with_matches,
    list_files,
    search_lines,
)

STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def rg_path() -> str:
    return str(find_ripgrep().path)


def raw_rg(args: list[str], cwd: Path) -> bytes:
    """rg run by hand, as a person would, with no Zuno code involved."""
    done = subprocess.run(
        [rg_path(), "--no-config", *args], cwd=cwd, capture_output=True, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def rg_children_after_exit() -> list[int]:
    """rg children still alive once killed ones have had time to finish dying.

    A killed process can stay runnable for a moment under load before it
    becomes a zombie; only one still there after that is left behind.
    """
    deadline = time.monotonic() + 10
    while (left := rg_children()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def rg_children() -> list[int]:
    """Live rg processes whose parent is this test process."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        # fields[0] is the state; a zombie is already dead.
        if comm == "rg" and int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.append(int(entry.name))
    return found


# ----------------------------------------------------------------------- locating


def test_parse_version_reads_rg_banner() -> None:
    assert parse_version("ripgrep 14.1.0\n\nfeatures:-pcre2\n") == (14, 1, 0)
    assert parse_version("ripgrep 13.0.0 (rev 7ec2fd51ba)") == (13, 0, 0)
    assert parse_version("grep (GNU grep) 3.8") is None


def test_find_ripgrep_finds_14_and_caches() -> None:
    first = find_ripgrep()
    assert first.version >= (14, 0, 0)
    assert first.path.name == "rg"
    assert find_ripgrep() is first


def test_zuno_rg_pointing_nowhere_is_unavailable_with_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ZUNO_RG", str(tmp_path / "no-such-rg"))
    with pytest.raises(RipgrepUnavailable) as caught:
        find_ripgrep(refresh=True)
    assert "pip install ripgrep==14.1.0" in str(caught.value)
    assert "--only-binary=ripgrep" in str(caught.value)


def test_too_old_rg_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "rg"
    fake.write_text("#!/bin/sh\necho 'ripgrep 13.0.0'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("ZUNO_RG", str(fake))
    with pytest.raises(RipgrepUnavailable, match=r"13\.0\.0, too old"):
        find_ripgrep(refresh=True)


def test_zuno_rg_override_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_ripgrep().path
    monkeypatch.setenv("ZUNO_RG", str(real))
    assert find_ripgrep(refresh=True).path == real


def test_path_is_searched_after_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = find_ripgrep().path
    monkeypatch.delenv("ZUNO_RG", raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-venv" / "python"))
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path / "no-scripts"))
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "rg").symlink_to(real)
    monkeypatch.setenv("PATH", str(on_path))
    assert find_ripgrep(refresh=True).path == on_path / "rg"

    (on_path / "rg").unlink()
    (on_path / "rg").write_text("#!/bin/sh\necho 'ripgrep 13.0.0'\n")
    (on_path / "rg").chmod(0o755)
    with pytest.raises(RipgrepUnavailable, match=r"too old.*pip install ripgrep==14\.1\.0"):
        find_ripgrep(refresh=True)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RipgrepUnavailable, match="no rg was found"):
        find_ripgrep(refresh=True)
    monkeypatch.undo()
    find_ripgrep(refresh=True)  # leave the cache as the other tests expect it


# ----------------------------------------------------------------------- searching


@pytest.mark.anyio
async def test_lines_sorted_by_path_component_then_line(tmp_path: Path) -> None:
    # "a.txt" sorts after "a/" component-wise even though "." < "/" bytewise.
    write(tmp_path, {"a.txt": "x\nhit 2\nhit 3\n", "a/z.txt": "hit\n", "B.txt": "hit\n"})
    found = await search_lines(tmp_path, Query("hit"), limit=100)
    assert [(line.path, line.number) for line in found.items] == [
        ("B.txt", 1),
        ("a/z.txt", 1),
        ("a.txt", 2),
        ("a.txt", 3),
    ]
    assert (found.shown, found.total, found.files, found.truncated) == (4, 4, 3, False)


@pytest.mark.anyio
async def test_context_lines_are_marked_and_limited(tmp_path: Path) -> None:
    write(tmp_path, {"f.txt": "a\nhit one\nb\nc\nd\nhit two\ne\n"})
    found = await search_lines(tmp_path, Query("hit"), limit=1, context=1)
    assert [(line.number, line.is_match) for line in found.items] == [
        (1, False),
        (2, True),
        (3, False),
    ]
    assert found.truncated and found.total == 2


@pytest.mark.anyio
async def test_limit_returns_the_first_n_of_the_full_answer(tmp_path: Path) -> None:
    files = {f"d{i % 7}/f{i:03}.py": "match\nother\nmatch again\n" for i in range(120)}
    write(tmp_path, files)
    full = await search_lines(tmp_path, Query("match"), limit=10_000)
    assert full.total == 240 and not full.truncated
    for limit in (1, 7, 99, 239):
        cut = await search_lines(tmp_path, Query("match"), limit=limit)
        assert cut.items == full.items[:limit]
        assert cut.shown == limit and cut.total == 240 and cut.truncated


@pytest.mark.anyio
async def test_same_tree_same_answer(tmp_path: Path) -> None:
    write(tmp_path, {f"p{i % 13}/q{i % 5}/n{i}.txt": "needle\n" * (i % 4 + 1) for i in range(400)})
    runs = [await search_lines(tmp_path, Query("needle"), limit=150) for _ in range(5)]
    assert all(run.items == runs[0].items for run in runs)
    listed = [await list_files(tmp_path, limit=50) for _ in range(5)]
    assert all(run.items == listed[0].items for run in listed)


@pytest.mark.anyio
async def test_order_matches_rg_sort_path(tmp_path: Path) -> None:
    write(
        tmp_path, {f"{c}{i}/x-{j}.txt": "k\n" for c in "aB_-" for i in range(3) for j in range(3)}
    )
    sorted_by_rg = raw_rg(["--files", "--sort", "path"], tmp_path).decode().splitlines()
    found = await list_files(tmp_path, limit=1000)
    assert found.items == sorted_by_rg


@pytest.mark.anyio
async def test_gitignore_respected_in_a_git_repository(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    await anyio.run_process(["git", "init", "-q", str(tmp_path)])
    write(
        tmp_path,
        {
            ".gitignore": "build/\n*.log\n",
            "src/keep.py": "token\n",
            "build/out.py": "token\n",
            "debug.log": "token\n",
        },
    )
    assert (await files_with_matches(tmp_path, Query("token"), limit=10)).items == ["src/keep.py"]
    assert (await list_files(tmp_path, limit=10)).items == ["src/keep.py"]


@pytest.mark.anyio
async def test_dot_ignore_respected_without_git(tmp_path: Path) -> None:
    write(tmp_path, {".ignore": "skip.txt\n", "skip.txt": "token\n", "keep.txt": "token\n"})
    assert (await files_with_matches(tmp_path, Query("token"), limit=10)).items == ["keep.txt"]


@pytest.mark.anyio
async def test_hidden_only_on_request_and_never_dot_git(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "shown.txt": "token\n",
            ".env": "token\n",
            ".config/app.toml": "token\n",
            ".git/config": "token\n",
        },
    )
    default = await files_with_matches(tmp_path, Query("token"), limit=10)
    assert default.items == ["shown.txt"]
    hidden = await files_with_matches(tmp_path, Query("token", hidden=True), limit=10)
    assert hidden.items == [".config/app.toml", ".env", "shown.txt"]


@pytest.mark.anyio
async def test_binary_files_skipped_and_non_utf8_decoded(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "blob.bin": b"\x00\x01token\x00\n",
            "latin1.txt": b"caf\xe9 token\n",
        },
    )
    (tmp_path / os.fsdecode(b"na\xefve.txt")).write_bytes(b"token here\n")
    found = await search_lines(tmp_path, Query("token"), limit=10)
    assert [line.path for line in found.items] == ["latin1.txt", "na\ufffdve.txt"]
    assert found.items[0].text == "caf\ufffd token"
    assert found.items[1].text == "token here"


@pytest.mark.anyio
async def test_long_lines_are_cut(tmp_path: Path) -> None:
    write(tmp_path, {"min.js": "token" + "x" * 5000 + "\n"})
    found = await search_lines(tmp_path, Query("token"), limit=10, max_line_chars=100)
    assert len(found.items[0].text) == 100
    assert found.items[0].omitted_chars == 4905


@pytest.mark.anyio
async def test_count_and_a_file_name_with_a_newline(tmp_path: Path) -> None:
    write(tmp_path, {"two\nlines.txt": "t\nt\n", "one.txt": "t\n"})
    found = await count_matches(tmp_path, Query("t"), limit=10)
    assert found.items == [FileCount("one.txt", 1), FileCount("two\nlines.txt", 2)]


@pytest.mark.anyio
async def test_a_single_file_can_be_searched(tmp_path: Path) -> None:
    write(tmp_path, {"sub/f.txt": "a\nhit\n"})
    found = await search_lines(tmp_path / "sub" / "f.txt", Query("hit"), limit=10)
    assert [(line.path, line.number) for line in found.items] == [("f.txt", 2)]


@pytest.mark.anyio
async def test_fixed_strings_ignore_case_and_dash_pattern(tmp_path: Path) -> None:
    write(tmp_path, {"f.txt": "a.b\naxb\n-v flag\nA.B\n"})
    literal = await search_lines(tmp_path, Query("a.b", fixed_strings=True), limit=10)
    assert [line.number for line in literal.items] == [1]
    folded = await search_lines(
        tmp_path, Query("a.b", fixed_strings=True, ignore_case=True), limit=10
    )
    assert [line.number for line in folded.items] == [1, 4]
    dash = await search_lines(tmp_path, Query("-v"), limit=10)
    assert [line.number for line in dash.items] == [3]


@pytest.mark.anyio
async def test_include_glob_selects_files(tmp_path: Path) -> None:
    write(tmp_path, {"a.py": "t\n", "b.ts": "t\n", "src/c.py": "t\n", "x/src/d.py": "t\n"})
    found = await files_with_matches(tmp_path, Query("t", include="*.py"), limit=10)
    assert found.items == ["a.py", "src/c.py", "x/src/d.py"]
    anchored = await files_with_matches(tmp_path, Query("t", include="src/**"), limit=10)
    assert anchored.items == ["src/c.py"]


@pytest.mark.anyio
async def test_invalid_regex_and_glob_raise_with_rgs_message(tmp_path: Path) -> None:
    write(tmp_path, {"f.txt": "x\n"})
    with pytest.raises(RipgrepError, match="regex parse error"):
        await search_lines(tmp_path, Query("a("), limit=10)
    with pytest.raises(RipgrepError, match="glob"):
        await list_files(tmp_path, glob="[", limit=10)


@pytest.mark.anyio
async def test_no_match_is_an_empty_answer(tmp_path: Path) -> None:
    write(tmp_path, {"f.txt": "x\n"})
    found = await search_lines(tmp_path, Query("zzz"), limit=10)
    assert (found.items, found.total, found.truncated) == ([], 0, False)


# ----------------------------------------------------------------------- process control


@pytest.mark.anyio
async def test_consumer_stop_kills_rg() -> None:
    rg = find_ripgrep()
    batches: list[list[bytes]] = []

    def consume(records: list[bytes]) -> bool:
        batches.append(records)
        return len(batches) < 2

    status = await rg.stream(["--files", "."], cwd=STDLIB, consume=consume)
    assert status.stopped and status.returncode is None
    assert len(batches) == 2 and all(batches)
    assert rg_children_after_exit() == []


@pytest.mark.anyio
async def test_cancellation_kills_rg() -> None:
    rg = find_ripgrep()
    started = anyio.Event()

    def consume(records: list[bytes]) -> bool:
        # consume runs in a worker thread: reach the event loop the anyio way.
        if not started.is_set():
            anyio.from_thread.run_sync(started.set)
        return True

    with anyio.move_on_after(30) as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rg.stream(["--json", "e", "."], cwd=STDLIB, consume=consume))
            await started.wait()
            assert rg_children() != []
            tg.cancel_scope.cancel()
    assert not scope.cancelled_caught
    assert rg_children_after_exit() == []


@pytest.mark.anyio
@pytest.mark.parametrize("delay", [0, 0.0005, 0.002, 0.01, 0.05])
async def test_cancellation_at_any_point_leaves_nothing_behind(delay: float) -> None:
    for _ in range(3):
        with anyio.move_on_after(delay):
            await search_lines(STDLIB, Query("import"), limit=10, context=2)
        with anyio.move_on_after(delay):
            await list_files(STDLIB, limit=10)
    assert rg_children_after_exit() == []


# ----------------------------------------------------------------------- against raw rg


def _raw_lines(pattern: str, cwd: Path) -> set[tuple[str, int]]:
    out = raw_rg(["--line-number", "--with-filename", "--null", "-e", pattern, "."], cwd)
    found: set[tuple[str, int]] = set()
    for record in out.splitlines():
        path, _, rest = record.partition(b"\0")
        found.add((path.decode("utf-8", "replace").removeprefix("./"), int(rest.split(b":")[0])))
    return found


@pytest.mark.anyio
@pytest.mark.parametrize("pattern", [r"def __\w+__\(self\)", r"class \w+Error\b"])
async def test_same_matches_as_raw_rg_on_the_stdlib(pattern: str) -> None:
    expected = _raw_lines(pattern, STDLIB)
    found = await search_lines(STDLIB, Query(pattern), limit=10**6)
    assert len(expected) > 100
    assert {(line.path, line.number) for line in found.items} == expected
    assert found.total == len(expected) and not found.truncated


@pytest.mark.anyio
async def test_first_n_equal_raw_rg_sorted_on_the_stdlib() -> None:
    out = raw_rg(["--sort", "path", "-n", "-H", "--null", "-e", r"\bimport re\b", "."], STDLIB)
    expected: list[tuple[str, int]] = []
    for record in out.splitlines()[:250]:
        path, _, rest = record.partition(b"\0")
        expected.append((path.decode().removeprefix("./"), int(rest.split(b":")[0])))
    found = await search_lines(STDLIB, Query(r"\bimport re\b"), limit=250)
    assert [(line.path, line.number) for line in found.items] == expected


@pytest.mark.anyio
async def test_files_and_counts_equal_raw_rg_on_the_stdlib() -> None:
    listed = raw_rg(["--files", "--sort", "path", "-g", "*.py", "."], STDLIB).decode()
    expected_files = [p.removeprefix("./") for p in listed.splitlines()]
    found = await list_files(STDLIB, glob="*.py", limit=10**6)
    assert found.items == expected_files

    email = STDLIB / "email"
    counted = raw_rg(["--count", "--sort", "path", "-e", "def ", "."], email).decode()
    expected_counts = [
        FileCount(path.removeprefix("./"), int(n))
        for path, n in (line.rsplit(":", 1) for line in counted.splitlines())
    ]
    assert (await count_matches(email, Query("def "), limit=1000)).items == expected_counts
    with_matches = await files_with_matches(email, Query("def "), limit=1000)
    assert with_matches.items == [c.path for c in expected_counts]


def test_module_exports_are_defined() -> None:
    for name in ripgrep.__all__:
        assert hasattr(ripgrep, name), name


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.binary(max_size=4), max_size=300),
    limit=st.integers(min_value=1, max_value=40),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=6),
)
def test_the_first_n_of_a_stream_fed_in_batches(
    keys: list[bytes], limit: int, cuts: list[int]
) -> None:
    smallest: _Smallest[bytes] = _Smallest(limit)
    bounds = sorted({0, len(keys), *(c for c in cuts if c <= len(keys))})
    for start, end in itertools.pairwise(bounds):
        smallest.extend(keys[start:end])
    assert smallest.result() == sorted(keys)[:limit]
    assert smallest.seen == len(keys)
