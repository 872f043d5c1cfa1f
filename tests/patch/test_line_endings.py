"""A lone CR is a line break, for matching and for reading; each line keeps its ending.

The file of Codex's scenario 024: ``one\\r\\ntwo\\rthree\\nfour\\r\\n`` (CRLF, a lone
CR, LF, CRLF).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from patch_support import apply_in, context_for, wrap  # pyright: ignore[reportMissingImports]

from zuno.tools.read import ReadArgs, ReadTool
from zuno.workspace.patch.textfile import TextFile

pytestmark = pytest.mark.anyio

MIXED = b"one\r\ntwo\rthree\nfour\r\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_lone_cr_splits_lines_and_every_ending_is_kept() -> None:
    text = TextFile.decode(MIXED)
    assert text.lines == ["one", "two", "three", "four"]
    assert text.encode() == MIXED


def test_a_patch_matches_lines_a_lone_cr_separates(tmp_path: Path) -> None:
    (tmp_path / "mixed.txt").write_bytes(MIXED)

    apply_in(tmp_path, wrap("*** Update File: mixed.txt", " two", "-three", "+THREE", " four"))

    assert (tmp_path / "mixed.txt").read_bytes() == b"one\r\ntwo\rTHREE\nfour\r\n"


def test_added_lines_take_the_commonest_ending_and_the_others_stay(tmp_path: Path) -> None:
    (tmp_path / "mixed.txt").write_bytes(MIXED)

    apply_in(tmp_path, wrap("*** Update File: mixed.txt", " one", "+new", " two"))

    assert (tmp_path / "mixed.txt").read_bytes() == b"one\r\nnew\r\ntwo\rthree\nfour\r\n"


def test_an_old_mac_file_keeps_its_cr_endings(tmp_path: Path) -> None:
    (tmp_path / "mac.txt").write_bytes(b"a\rb\rc\r")

    apply_in(tmp_path, wrap("*** Update File: mac.txt", " a", "-b", "+B", "+b2"))

    assert (tmp_path / "mac.txt").read_bytes() == b"a\rB\rb2\rc\r"


async def test_read_shows_a_lone_cr_as_a_break_and_names_each_ending(tmp_path: Path) -> None:
    (tmp_path / "mixed.txt").write_bytes(MIXED)

    result = await ReadTool().run(ReadArgs(path="mixed.txt"), context_for(tmp_path))

    lines = result.output.splitlines()
    assert lines[:4] == ["1\tone", "2\ttwo", " \tthree", "3\tfour"]
    assert "CRLF line endings" not in result.output  # it is not a CRLF file
    assert "mixes line endings (2 CRLF, 1 LF, 1 lone CR" in result.output
