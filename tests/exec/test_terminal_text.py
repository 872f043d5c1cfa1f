"""What the model reads of a terminal program's output (:mod:`zuno.execution.terminal_text`)."""

from __future__ import annotations

from zuno.execution.terminal_text import TerminalText


def plain(*chunks: bytes) -> str:
    screen = TerminalText()
    text = "".join(screen.feed(chunk) for chunk in chunks)
    return text + screen.feed(b"", final=True)


def test_colours_titles_and_modes_are_dropped() -> None:
    raw = b"\x1b]0;my title\x07\x1b[?2004h\x1b[1;31mred\x1b[0m and \x1b(Bplain\x1b[K\r\n"
    assert plain(raw) == "red and plain\n"


def test_a_sequence_or_a_character_cut_between_chunks_waits_for_its_end() -> None:
    assert plain(b"a\x1b[3", b"2mb\xc3", b"\xa9\x1b]2;t", b"itle\x1b\\c") == "ab\u00e9c"
    screen = TerminalText()
    assert screen.feed(b"x\x1b[") == "x"  # held back: nothing half-stripped is shown
    assert screen.feed(b"0mz") == "z"


def test_carriage_returns_and_backspaces_overwrite_like_a_screen() -> None:
    assert plain(b"10%\r50%\r100%\r\n") == "100%\n"
    assert plain(b"abcdef\rXY\n") == "XYcdef\n"
    assert plain(b"abcdef\r\x1b[Kdone\n") == "done\n"  # erase-in-line clears the rest
    assert plain(b"pa\x08\x08ok\n") == "ok\n"
    assert plain(b"ring\x07 \x00end\n") == "ring end\n"


def test_a_carriage_return_at_a_chunk_end_still_pairs_with_its_newline() -> None:
    assert plain(b"line one\r", b"\nline two\r\n") == "line one\nline two\n"
