"""The patch grammar: envelope, wrappers, operations, chunks and their errors."""

from __future__ import annotations

import pytest
from patch_support import wrap

from zuno.workspace.patch.model import AddFile, BodyLine, DeleteFile, PatchError, UpdateFile
from zuno.workspace.patch.parser import parse_patch


def _update(text: str) -> UpdateFile:
    (op,) = parse_patch(text).operations
    assert isinstance(op, UpdateFile)
    return op


def test_add_file_content_is_lines_without_plus_each_ending_in_newline() -> None:
    (op,) = parse_patch(wrap("*** Add File: a/b.txt", "+one", "+", "+  three")).operations
    assert op == AddFile("a/b.txt", "one\n\n  three\n", 2)


def test_add_file_with_no_lines_is_an_empty_file() -> None:
    (op,) = parse_patch(wrap("*** Add File: empty.txt")).operations
    assert isinstance(op, AddFile)
    assert op.content == ""


def test_delete_file_is_one_line() -> None:
    ops = parse_patch(wrap("*** Delete File: old.txt", "*** Delete File: other.txt")).operations
    assert ops == (DeleteFile("old.txt", 2), DeleteFile("other.txt", 3))


def test_update_with_move_and_several_context_lines() -> None:
    op = _update(
        wrap(
            "*** Update File: src/a.py",
            "*** Move to: src/b.py",
            "@@ class A:",
            "@@     def f(self):",
            "     x = 1",
            "-    return x",
            "+    return x + 1",
        )
    )
    assert op.path == "src/a.py"
    assert op.move_to == "src/b.py"
    (chunk,) = op.chunks
    assert chunk.contexts == ("class A:", "    def f(self):")
    assert chunk.old_lines == ["    x = 1", "    return x"]
    assert chunk.new_lines == ["    x = 1", "    return x + 1"]
    assert not chunk.end_of_file


def test_first_chunk_may_omit_the_at_at_line() -> None:
    op = _update(wrap("*** Update File: a", "-old", "+new", "@@ ctx", " keep", "+more"))
    assert [c.contexts for c in op.chunks] == [(), ("ctx",)]
    assert op.chunks[0].body == (BodyLine("-", "old"), BodyLine("+", "new"))


def test_empty_line_in_a_chunk_is_an_empty_context_line() -> None:
    op = _update(wrap("*** Update File: a", "@@", " a", "", " b", "+c"))
    assert op.chunks[0].old_lines == ["a", "", "b"]


def test_end_of_file_marker_anchors_the_chunk() -> None:
    op = _update(wrap("*** Update File: a", "@@", " last", "+after", "*** End of File"))
    assert op.chunks[0].end_of_file


def test_bare_at_at_has_no_context_and_starts_a_new_chunk() -> None:
    op = _update(wrap("*** Update File: a", "@@", "-x", "+y", "@@", "-z", "+w"))
    assert len(op.chunks) == 2
    assert all(c.contexts == () for c in op.chunks)


def test_unified_diff_hunk_header_is_tolerated_and_its_tail_is_context() -> None:
    op = _update(wrap("*** Update File: a", "@@ -10,3 +10,4 @@ def f():", "-x", "+y"))
    assert op.chunks[0].contexts == ("def f():",)
    op = _update(wrap("*** Update File: a", "@@ -1 +1 @@", "-x", "+y"))
    assert op.chunks[0].contexts == ()


@pytest.mark.parametrize(
    "opener",
    ["<<'EOF'", "<<EOF", '<<"EOF"', "apply_patch <<'EOF'", "apply_patch <<EOF", "<<'PATCH'"],
)
def test_heredoc_wrappers_are_tolerated(opener: str) -> None:
    word = opener.split("<<")[1].strip("'\"")
    text = f"{opener}\n{wrap('*** Delete File: a.txt')}{word}\n"
    assert parse_patch(text).operations == (DeleteFile("a.txt", 3),)


def test_heredoc_without_terminator_is_still_read() -> None:
    text = "apply_patch <<'EOF'\n" + wrap("*** Delete File: a.txt")
    assert parse_patch(text).operations == (DeleteFile("a.txt", 3),)


def test_surrounding_whitespace_and_spaced_markers_are_ignored() -> None:
    text = "\n\n   *** Begin Patch  \n*** Delete File: a.txt\n  *** End Patch \n\n"
    assert parse_patch(text).operations == (DeleteFile("a.txt", 4),)


def test_crlf_patch_text_is_read_like_lf() -> None:
    text = wrap("*** Update File: a", "@@", "-x", "+y").replace("\n", "\r\n")
    assert _update(text).chunks[0].new_lines == ["y"]


def test_blank_lines_between_operations_are_tolerated() -> None:
    text = wrap("*** Add File: a", "+x", "", "", "*** Delete File: b", "")
    ops = parse_patch(text).operations
    assert [type(op) for op in ops] == [AddFile, DeleteFile]
    assert isinstance(ops[0], AddFile) and ops[0].content == "x\n"


def test_body_line_with_stars_content_is_not_a_header() -> None:
    op = _update(wrap("*** Update File: a.md", "@@", " *** Update File: b", "-**x**", "+*y*"))
    assert op.chunks[0].old_lines == ["*** Update File: b", "**x**"]


def test_missing_begin_marker_is_named() -> None:
    with pytest.raises(PatchError, match=r"first line must be '\*\*\* Begin Patch'; line 1"):
        parse_patch("*** Delete File: a\n*** End Patch")


def test_missing_end_marker_is_named() -> None:
    with pytest.raises(PatchError, match=r"last line must be '\*\*\* End Patch'; line 2"):
        parse_patch("*** Begin Patch\n*** Delete File: a")


def test_both_markers_missing_are_named() -> None:
    with pytest.raises(PatchError, match=r"Begin Patch.*End Patch.*both are missing"):
        parse_patch("hello\nworld")


@pytest.mark.parametrize("text", ["", "   \n\n", "*** Begin Patch\n*** End Patch", "<<EOF\nEOF"])
def test_empty_patch_is_an_error(text: str) -> None:
    with pytest.raises(PatchError, match=r"empty"):
        parse_patch(text)


def test_bad_header_lists_valid_headers_and_line_number() -> None:
    with pytest.raises(PatchError) as info:
        parse_patch(wrap("*** Delete File: a", "*** Remove File: b"))
    message = str(info.value)
    assert "line 3" in message
    assert "'*** Remove File: b'" in message
    for header in ("*** Add File: PATH", "*** Delete File: PATH", "*** Update File: PATH"):
        assert header in message
    assert "*** Move to: PATH" in message


def test_bad_body_line_quotes_the_line_and_the_three_prefixes() -> None:
    with pytest.raises(PatchError) as info:
        parse_patch(wrap("*** Update File: src/x.py", "@@ def f():", "\treturn 1"))
    message = str(info.value)
    assert "line 4" in message
    assert "'\\treturn 1'" in message
    assert "' ' (context), '-' (removed) or '+' (added)" in message
    assert "src/x.py" in message


def test_update_without_chunk_names_the_path() -> None:
    with pytest.raises(PatchError, match=r"line 2: '\*\*\* Update File: lib/m.py' has no chunk"):
        parse_patch(wrap("*** Update File: lib/m.py", "*** Delete File: b"))


def test_add_line_without_plus_is_an_error() -> None:
    with pytest.raises(PatchError, match=r"line 4: .*every line must start with '\+'; got 'two'"):
        parse_patch(wrap("*** Add File: a", "+one", "two"))


def test_header_without_path_is_an_error() -> None:
    with pytest.raises(PatchError, match=r"line 2: '\*\*\* Add File: PATH' is missing its path"):
        parse_patch(wrap("*** Add File:   "))


def test_chunk_header_without_body_is_an_error() -> None:
    with pytest.raises(PatchError, match=r"line 3: a chunk of .* has no lines"):
        parse_patch(wrap("*** Update File: a", "@@ def f():", "*** Delete File: b"))


def test_chunk_after_end_of_file_needs_its_own_at_at() -> None:
    with pytest.raises(PatchError, match=r"must start with '@@'"):
        parse_patch(wrap("*** Update File: a", "@@", "+x", "*** End of File", " y"))


def test_second_end_patch_marker_is_reported() -> None:
    text = wrap("*** Delete File: a") + wrap("*** Delete File: b")
    with pytest.raises(PatchError, match=r"line 3: '\*\*\* End Patch' appears before the end"):
        parse_patch(text)


def test_line_numbers_count_from_the_original_text() -> None:
    text = "\n\napply_patch <<'EOF'\n" + wrap("*** Update File: a", "@@", "?bad") + "EOF\n"
    with pytest.raises(PatchError, match=r"line 7:"):
        parse_patch(text)
