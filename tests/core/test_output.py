"""Bounded output: head and tail within limits, the rest in an artifact."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from zuno.contract.output import BoundedOutput, OutputLimits, bound_text


def test_small_output_is_kept_whole_and_no_artifact(tmp_path: Path) -> None:
    out = BoundedOutput(OutputLimits(1024, 10), tmp_path / "a.txt")
    out.feed(b"one\ntwo\n")
    result = out.finish()
    assert result.text == "one\ntwo\n" and not result.truncated
    assert not (tmp_path / "a.txt").exists()


def test_too_many_lines_keeps_head_and_tail_and_says_where(tmp_path: Path) -> None:
    out = BoundedOutput(OutputLimits(100_000, 10), tmp_path / "a.txt")
    for i in range(1000):
        out.feed(f"line {i}\n".encode())
    result = out.finish()
    assert result.truncated and result.total_lines == 1000
    assert result.text.startswith("line 0\nline 1\n")
    assert result.text.rstrip().endswith("line 999")
    assert f"{result.omitted_lines} lines" in result.text and str(tmp_path / "a.txt") in result.text
    shown = [line for line in result.text.splitlines() if line.startswith("line ")]
    assert result.omitted_lines == 1000 - len(shown)
    assert result.text.count("\n") <= 10
    assert (tmp_path / "a.txt").read_text().count("\n") == 1000


def test_invalid_utf8_is_replaced_and_split_characters_survive(tmp_path: Path) -> None:
    out = BoundedOutput(OutputLimits(1024, 100), None)
    data = "héllo wörld\n".encode()
    for byte in data:  # one byte at a time splits the multi-byte characters
        out.feed(bytes([byte]))
    out.feed(b"\xff\xfe bad\n")
    text = out.finish().text
    assert text.startswith("héllo wörld\n") and "\ufffd" in text


def test_memory_stays_bounded_for_a_large_stream(tmp_path: Path) -> None:
    out = BoundedOutput(OutputLimits(51200, 2000), tmp_path / "big.txt")
    chunk = (b"x" * 1023 + b"\n") * 256  # 256 KiB
    tracemalloc.start()
    for _ in range(400):  # 100 MiB
        out.feed(chunk)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    result = out.finish()
    assert peak < 8 * 1024 * 1024
    assert result.truncated and result.total_bytes == 400 * len(chunk)
    assert len(result.text.encode()) < 51200 + 1024


def test_one_huge_line_is_cut_by_bytes(tmp_path: Path) -> None:
    result = bound_text("y" * 200_000, OutputLimits(2048, 10), tmp_path / "r.txt")
    assert result.truncated and len(result.text.encode()) < 2048 + 512
    assert (tmp_path / "r.txt").stat().st_size == 200_000


@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(st.binary(max_size=300), max_size=40),
    max_bytes=st.integers(64, 2000),
    max_lines=st.integers(2, 50),
)
def test_bounded_text_never_exceeds_limits_by_more_than_the_marker(
    chunks: list[bytes], max_bytes: int, max_lines: int
) -> None:
    out = BoundedOutput(OutputLimits(max_bytes, max_lines), None)
    for chunk in chunks:
        out.feed(chunk)
    result = out.finish()
    total = b"".join(chunks)
    assert result.total_bytes == len(total)
    if not result.truncated:
        assert result.text == total.decode("utf-8", errors="replace")
    else:
        body = result.text.split("\n[... ")[0]
        assert len(body.encode()) <= max_bytes * 2
        assert result.text.count("\n") <= max_lines + 4


def test_a_cut_text_fits_the_limits_with_its_marker(tmp_path: Path) -> None:
    limits = OutputLimits(4096, 50)
    result = bound_text("z" * 10 + "\n" + "y" * 100_000, limits, tmp_path / "r.txt")
    assert result.truncated
    again = bound_text(result.text, limits, tmp_path / "again.txt")
    assert not again.truncated and len(result.text.encode()) <= 4096
    many = bound_text("line\n" * 10_000, limits, tmp_path / "l.txt")
    assert many.text.count("\n") <= 50


@given(st.lists(st.sampled_from([b"\n", b"a", b"\xff", b"\n\n", b"x" * 300]), max_size=200))
def test_newlines_are_counted_exactly_sparse_or_dense(pieces: list[bytes]) -> None:
    from zuno.contract.output import _count_newlines  # pyright: ignore[reportPrivateUsage]

    data = b"".join(pieces)
    assert _count_newlines(data) == data.count(b"\n")


@settings(max_examples=60, deadline=None)
@given(
    line=st.integers(min_value=1, max_value=3000),
    lines=st.integers(min_value=0, max_value=400),
    chunk=st.integers(min_value=1, max_value=1 << 17),
)
def test_lines_are_counted_exactly_whatever_their_length(line: int, lines: int, chunk: int) -> None:
    """Short lines are counted one way and long ones another: both agree with count()."""
    data = (b"x" * (line - 1) + b"\n") * lines + b"end"
    out = BoundedOutput(OutputLimits(1024, 10))
    for start in range(0, len(data), chunk):
        out.feed(data[start : start + chunk])
    assert out.finish().total_lines == data.count(b"\n") + 1
