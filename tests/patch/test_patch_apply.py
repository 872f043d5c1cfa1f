"""Applying patches to real files: operations, locating, matching, preservation."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from patch_support import apply_in, plan_in, snapshot, wrap

from zuno.workspace.patch.model import PatchError


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


# --- file operations --------------------------------------------------------------------


def test_add_file_creates_parent_folders(ws: Path) -> None:
    plan = apply_in(ws, wrap("*** Add File: a/b/c.txt", "+hello", "+world"))
    assert (ws / "a/b/c.txt").read_text() == "hello\nworld\n"
    assert plan.output == "Success. Updated the following files:\nA a/b/c.txt"


def test_add_over_existing_file_replaces_it(ws: Path) -> None:
    write(ws / "x.txt", "old\n")
    apply_in(ws, wrap("*** Add File: x.txt", "+new"))
    assert (ws / "x.txt").read_text() == "new\n"


def test_add_over_a_folder_is_refused(ws: Path) -> None:
    (ws / "d").mkdir()
    with pytest.raises(PatchError, match=r"cannot add d: a folder is there"):
        apply_in(ws, wrap("*** Add File: d", "+x"))


def test_add_under_a_file_is_refused(ws: Path) -> None:
    write(ws / "f", "x\n")
    with pytest.raises(PatchError, match=r"cannot create f/g.txt"):
        apply_in(ws, wrap("*** Add File: f/g.txt", "+x"))


def test_delete_file(ws: Path) -> None:
    write(ws / "gone.txt", "bye\n")
    plan = apply_in(ws, wrap("*** Delete File: gone.txt"))
    assert not (ws / "gone.txt").exists()
    assert plan.summary == ("D gone.txt",)


def test_delete_missing_file_is_an_error(ws: Path) -> None:
    with pytest.raises(PatchError, match=r"line 2: cannot delete nope.txt: no such file"):
        apply_in(ws, wrap("*** Delete File: nope.txt"))


def test_delete_folder_is_an_error(ws: Path) -> None:
    (ws / "dir").mkdir()
    with pytest.raises(PatchError, match=r"cannot delete dir: it is a folder"):
        apply_in(ws, wrap("*** Delete File: dir"))
    assert (ws / "dir").is_dir()


def test_update_replaces_lines(ws: Path) -> None:
    write(ws / "m.py", "a\nb\nc\n")
    plan = apply_in(ws, wrap("*** Update File: m.py", "@@", " a", "-b", "+B", " c"))
    assert (ws / "m.py").read_text() == "a\nB\nc\n"
    assert plan.summary == ("M m.py",)


def test_update_missing_file_suggests_add(ws: Path) -> None:
    with pytest.raises(PatchError, match=r"cannot update new.py: no such file; use '\*\*\* Add"):
        apply_in(ws, wrap("*** Update File: new.py", "@@", "+x"))


def test_update_with_move_writes_new_path_and_removes_old(ws: Path) -> None:
    write(ws / "old/a.py", "x = 1\n")
    plan = apply_in(
        ws, wrap("*** Update File: old/a.py", "*** Move to: new/b.py", "@@", "-x = 1", "+x = 2")
    )
    assert not (ws / "old/a.py").exists()
    assert (ws / "new/b.py").read_text() == "x = 2\n"
    assert plan.summary == ("M new/b.py",)


def test_move_onto_existing_path_replaces_it(ws: Path) -> None:
    write(ws / "a.txt", "from a\n")
    write(ws / "b.txt", "was b\n")
    apply_in(ws, wrap("*** Update File: a.txt", "*** Move to: b.txt", "@@", " from a", "+more"))
    assert not (ws / "a.txt").exists()
    assert (ws / "b.txt").read_text() == "from a\nmore\n"


def test_move_onto_itself_keeps_the_file(ws: Path) -> None:
    write(ws / "a.txt", "one\n")
    plan = apply_in(ws, wrap("*** Update File: a.txt", "*** Move to: ./a.txt", "@@", "-one", "+1"))
    assert (ws / "a.txt").read_text() == "1\n"
    assert plan.summary == ("M ./a.txt",)


def test_move_keeps_permission_bits(ws: Path) -> None:
    script = write(ws / "run.sh", "echo hi\n")
    script.chmod(0o755)
    apply_in(ws, wrap("*** Update File: run.sh", "*** Move to: bin/run.sh", "-echo hi", "+echo ho"))
    assert stat.S_IMODE((ws / "bin/run.sh").stat().st_mode) == 0o755


def test_add_then_update_same_file_in_one_patch(ws: Path) -> None:
    apply_in(ws, wrap("*** Add File: n.txt", "+a", "+b", "*** Update File: n.txt", "-b", "+c"))
    assert (ws / "n.txt").read_text() == "a\nc\n"


def test_success_output_lists_every_operation(ws: Path) -> None:
    write(ws / "m.txt", "x\n")
    write(ws / "d.txt", "y\n")
    plan = apply_in(
        ws,
        wrap(
            "*** Add File: a.txt",
            "+new",
            "*** Update File: m.txt",
            "-x",
            "+z",
            "*** Delete File: d.txt",
        ),
    )
    assert plan.output.splitlines()[1:] == ["A a.txt", "M m.txt", "D d.txt"]


def test_binary_file_update_is_refused(ws: Path) -> None:
    write(ws / "b.bin", b"a\x00b\n")
    with pytest.raises(PatchError, match=r"binary"):
        apply_in(ws, wrap("*** Update File: b.bin", "-a", "+b"))


# --- locating ---------------------------------------------------------------------------


def test_chunks_apply_in_order_from_previous_end(ws: Path) -> None:
    write(ws / "f", "x\ny\nx\nz\n")
    # "x" alone matches twice in the file, but once after the first chunk.
    apply_in(ws, wrap("*** Update File: f", "@@", "-x", "+X1", " y", "@@", "-x", "+X2"))
    assert (ws / "f").read_text() == "X1\ny\nX2\nz\n"


def test_several_context_lines_narrow_step_by_step(ws: Path) -> None:
    source = (
        "class A:\n    def run(self):\n        return 0\n"
        "class B:\n    def stop(self):\n        return 0\n    def run(self):\n        return 0\n"
    )
    write(ws / "m.py", source)
    apply_in(
        ws,
        wrap(
            "*** Update File: m.py",
            "@@ class B:",
            "@@     def run(self):",
            "-        return 0",
            "+        return 2",
        ),
    )
    assert (ws / "m.py").read_text().splitlines()[-1] == "        return 2"
    assert (ws / "m.py").read_text().count("return 0") == 2


def test_context_line_not_found_is_quoted(ws: Path) -> None:
    write(ws / "m.py", "a\n")
    with pytest.raises(PatchError) as info:
        apply_in(ws, wrap("*** Update File: m.py", "@@ def missing():", "-a", "+b"))
    assert "m.py" in str(info.value)
    assert "    def missing():" in str(info.value)


def test_old_lines_not_found_names_file_and_quotes_lines(ws: Path) -> None:
    write(ws / "m.py", "a\nb\n")
    with pytest.raises(PatchError) as info:
        apply_in(ws, wrap("*** Update File: m.py", "@@", " a", "-nothere", "+x"))
    message = str(info.value)
    assert message.startswith("m.py: ")
    assert "patch line 3" in message
    assert "    a\n    nothere" in message


def test_chunks_out_of_order_get_a_hint(ws: Path) -> None:
    write(ws / "m", "one\ntwo\nthree\n")
    with pytest.raises(PatchError, match=r"occur at file line 1, before the previous chunk"):
        apply_in(ws, wrap("*** Update File: m", "@@", "-three", "+3", "@@", "-one", "+1"))


def test_ambiguous_match_is_rejected_with_line_numbers(ws: Path) -> None:
    write(ws / "m.py", "def a():\n    return 1\n\ndef b():\n    return 1\n")
    with pytest.raises(PatchError, match=r"ambiguous: its lines match at file lines 2, 5\."):
        apply_in(ws, wrap("*** Update File: m.py", "-    return 1", "+    return 2"))
    assert (ws / "m.py").read_text().count("return 1") == 2


def test_context_line_disambiguates(ws: Path) -> None:
    write(ws / "m.py", "def a():\n    return 1\n\ndef b():\n    return 1\n")
    apply_in(ws, wrap("*** Update File: m.py", "@@ def b():", "-    return 1", "+    return 2"))
    assert (ws / "m.py").read_text() == "def a():\n    return 1\n\ndef b():\n    return 2\n"


def test_pure_addition_after_context_goes_right_after_it(ws: Path) -> None:
    write(ws / "m.py", "import os\n\ndef f():\n    pass\n")
    apply_in(ws, wrap("*** Update File: m.py", "@@ import os", "+import sys"))
    assert (ws / "m.py").read_text() == "import os\nimport sys\n\ndef f():\n    pass\n"


def test_pure_addition_without_context_goes_to_the_end(ws: Path) -> None:
    write(ws / "m.txt", "a\nb\n")
    apply_in(ws, wrap("*** Update File: m.txt", "@@", "+c"))
    assert (ws / "m.txt").read_text() == "a\nb\nc\n"


def test_end_of_file_anchors_at_the_last_occurrence(ws: Path) -> None:
    write(ws / "m", "end\nmiddle\nend\n")
    apply_in(ws, wrap("*** Update File: m", "@@", "-end", "+END", "*** End of File"))
    assert (ws / "m").read_text() == "end\nmiddle\nEND\n"


def test_end_of_file_chunk_not_at_end_is_an_error_with_hint(ws: Path) -> None:
    write(ws / "m", "a\nb\n")
    with pytest.raises(
        PatchError, match=r"(?s)at the end of the file.*remove '\*\*\* End of File'"
    ):
        apply_in(ws, wrap("*** Update File: m", "@@", "-a", "+A", "*** End of File"))


def test_trailing_blank_context_line_the_file_lacks_is_tolerated(ws: Path) -> None:
    write(ws / "m", "a\nb\n")
    apply_in(ws, wrap("*** Update File: m", "@@", " a", "-b", "+B", ""))
    assert (ws / "m").read_text() == "a\nB\n"


def test_context_repeated_as_first_body_line_is_tolerated(ws: Path) -> None:
    write(ws / "m.py", "def f():\n    return 1\n")
    apply_in(
        ws,
        wrap("*** Update File: m.py", "@@ def f():", " def f():", "-    return 1", "+    return 2"),
    )
    assert (ws / "m.py").read_text() == "def f():\n    return 2\n"


# --- matching levels --------------------------------------------------------------------


def test_match_ignoring_trailing_whitespace(ws: Path) -> None:
    write(ws / "m", "keep   \nold\t\n")
    apply_in(ws, wrap("*** Update File: m", "@@", " keep", "-old", "+new"))
    assert (ws / "m").read_text() == "keep   \nnew\n"


def test_match_ignoring_leading_whitespace(ws: Path) -> None:
    write(ws / "m", "\t\tkeep\n\t\told\n")
    apply_in(ws, wrap("*** Update File: m", "@@", " keep", "-old", "+\t\tnew"))
    assert (ws / "m").read_text() == "\t\tkeep\n\t\tnew\n"


def test_match_with_unicode_punctuation_normalized(ws: Path) -> None:
    write(ws / "m", "say(\u201chi\u201d) \u2014 it\u2019s\u00a0fine\nx\n")
    apply_in(ws, wrap("*** Update File: m", "@@", ' say("hi") - it\'s fine', "-x", "+y"))
    assert (ws / "m").read_text() == "say(\u201chi\u201d) \u2014 it\u2019s\u00a0fine\ny\n"


def test_exact_match_elsewhere_beats_a_forgiving_match_first(ws: Path) -> None:
    write(ws / "m", "value  \nvalue\n")
    apply_in(ws, wrap("*** Update File: m", "-value", "+changed"))
    assert (ws / "m").read_text() == "value  \nchanged\n"


def test_ambiguity_is_judged_at_the_first_level_that_matches(ws: Path) -> None:
    write(ws / "m", "x \nx\t\n")
    with pytest.raises(PatchError, match=r"lines 1, 2"):
        apply_in(ws, wrap("*** Update File: m", "-x", "+y"))


# --- preservation -----------------------------------------------------------------------


def test_crlf_line_endings_are_kept(ws: Path) -> None:
    write(ws / "w.txt", b"a\r\nb\r\nc\r\n")
    apply_in(ws, wrap("*** Update File: w.txt", " a", "-b", "+B", "+B2"))
    assert (ws / "w.txt").read_bytes() == b"a\r\nB\r\nB2\r\nc\r\n"


def test_byte_order_mark_is_kept(ws: Path) -> None:
    write(ws / "bom.txt", b"\xef\xbb\xbfa\nb\n")
    apply_in(ws, wrap("*** Update File: bom.txt", "-a", "+A"))
    assert (ws / "bom.txt").read_bytes() == b"\xef\xbb\xbfA\nb\n"


def test_missing_final_newline_is_kept(ws: Path) -> None:
    write(ws / "n.txt", "a\nb")
    apply_in(ws, wrap("*** Update File: n.txt", "-b", "+B"))
    assert (ws / "n.txt").read_bytes() == b"a\nB"


def test_append_at_end_of_file_without_final_newline(ws: Path) -> None:
    write(ws / "n.txt", b"a\r\nb")
    apply_in(ws, wrap("*** Update File: n.txt", "@@", " b", "+c", "*** End of File"))
    assert (ws / "n.txt").read_bytes() == b"a\r\nb\r\nc"


def test_mixed_line_endings_keep_untouched_lines(ws: Path) -> None:
    write(ws / "mix", b"a\r\nb\nc\r\nd\r\n")
    apply_in(ws, wrap("*** Update File: mix", " b", "-c", "+C"))
    assert (ws / "mix").read_bytes() == b"a\r\nb\nC\r\nd\r\n"


def test_invalid_utf8_bytes_survive(ws: Path) -> None:
    write(ws / "latin.txt", b"caf\xe9\nold\n")
    apply_in(ws, wrap("*** Update File: latin.txt", "-old", "+new"))
    assert (ws / "latin.txt").read_bytes() == b"caf\xe9\nnew\n"


def test_permission_bits_are_kept(ws: Path) -> None:
    script = write(ws / "s.sh", "echo a\n")
    script.chmod(0o750)
    apply_in(ws, wrap("*** Update File: s.sh", "-echo a", "+echo b"))
    assert stat.S_IMODE(script.stat().st_mode) == 0o750


def test_symlink_inside_workspace_is_written_through(ws: Path) -> None:
    target = write(ws / "real.txt", "a\n")
    (ws / "link.txt").symlink_to("real.txt")
    apply_in(ws, wrap("*** Update File: link.txt", "-a", "+b"))
    assert (ws / "link.txt").is_symlink()
    assert target.read_text() == "b\n"


# --- diff -------------------------------------------------------------------------------


def test_diff_of_an_update_has_correct_hunk_numbers(ws: Path) -> None:
    write(ws / "f", "".join(f"l{i}\n" for i in range(1, 21)))
    plan = plan_in(
        ws, wrap("*** Update File: f", "@@", " l4", "-l5", "+five", "+5b", "@@", " l15", "-l16")
    )
    assert plan.diff == (
        "--- a/f\n+++ b/f\n"
        "@@ -2,7 +2,8 @@\n l2\n l3\n l4\n-l5\n+five\n+5b\n l6\n l7\n l8\n"
        "@@ -13,7 +14,6 @@\n l13\n l14\n l15\n-l16\n l17\n l18\n l19\n"
    )
    assert (ws / "f").read_text().startswith("l1\nl2\n")  # planning wrote nothing


def test_diff_of_add_delete_and_move(ws: Path) -> None:
    write(ws / "d", "x\n")
    write(ws / "m", "1\n")
    plan = plan_in(
        ws,
        wrap(
            "*** Add File: a",
            "+n",
            "*** Delete File: d",
            "*** Update File: m",
            "*** Move to: m2",
            "-1",
            "+2",
        ),
    )
    assert plan.diff == (
        "--- /dev/null\n+++ b/a\n@@ -0,0 +1,1 @@\n+n\n"
        "--- a/d\n+++ /dev/null\n@@ -1,1 +0,0 @@\n-x\n"
        "--- a/m\n+++ b/m2\n@@ -1,1 +1,1 @@\n-1\n+2\n"
    )


# --- all or nothing ---------------------------------------------------------------------


def test_failure_in_a_later_operation_changes_nothing(ws: Path) -> None:
    write(ws / "a.txt", "a\n")
    write(ws / "gone.txt", "g\n")
    write(ws / "c.txt", "c\n")
    before = snapshot(ws)
    with pytest.raises(PatchError, match=r"c.txt"):
        apply_in(
            ws,
            wrap(
                "*** Update File: a.txt",
                "-a",
                "+A",
                "*** Add File: new/dir/n.txt",
                "+n",
                "*** Delete File: gone.txt",
                "*** Update File: a.txt",
                "*** Move to: moved.txt",
                "-A",
                "+AA",
                "*** Update File: c.txt",
                "-not in the file",
                "+x",
            ),
        )
    assert snapshot(ws) == before


def test_write_failure_midway_restores_every_file(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(ws / "a.txt", "a\n")
    write(ws / "b.txt", "b\n")
    write(ws / "d.txt", "d\n")
    before = snapshot(ws)
    real_replace = os.replace
    calls = {"n": 0}

    def failing_replace(
        src: str | os.PathLike[str], dst: str | os.PathLike[str], **dir_fds: int
    ) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device", str(dst))
        real_replace(src, dst, **dir_fds)

    monkeypatch.setattr(os, "replace", failing_replace)
    from zuno.workspace.patch.model import PatchWriteError

    with pytest.raises(PatchWriteError, match=r"every file was restored") as info:
        apply_in(
            ws,
            wrap(
                "*** Delete File: d.txt",
                "*** Update File: a.txt",
                "-a",
                "+A",
                "*** Add File: n/new.txt",
                "+n",
                "*** Update File: b.txt",
                "-b",
                "+B",
            ),
        )
    assert info.value.restored
    monkeypatch.undo()
    assert snapshot(ws) == before


# --- workspace boundary -----------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["../outside.txt", "sub/../../outside.txt", "/tmp/zuno-outside-test.txt"]
)
def test_paths_leaving_the_workspace_are_refused_before_writing(ws: Path, path: str) -> None:
    write(ws / "a.txt", "a\n")
    before = snapshot(ws.parent)
    with pytest.raises(PatchError, match=r"outside the workspace"):
        apply_in(ws, wrap("*** Update File: a.txt", "-a", "+A", "*** Add File: " + path, "+x"))
    assert snapshot(ws.parent) == before
    assert not Path("/tmp/zuno-outside-test.txt").exists()


def test_symlinked_folder_leading_out_is_refused(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "escape").symlink_to(outside)
    with pytest.raises(PatchError, match=r"outside the workspace"):
        apply_in(ws, wrap("*** Add File: escape/x.txt", "+x"))
    assert list(outside.iterdir()) == []


def test_symlinked_file_leading_out_is_refused(ws: Path, tmp_path: Path) -> None:
    secret = write(tmp_path / "secret.txt", "s\n")
    (ws / "s.txt").symlink_to(secret)
    with pytest.raises(PatchError, match=r"outside the workspace"):
        apply_in(ws, wrap("*** Update File: s.txt", "-s", "+S"))
    assert secret.read_text() == "s\n"


def test_move_target_outside_is_refused(ws: Path) -> None:
    write(ws / "a.txt", "a\n")
    with pytest.raises(PatchError, match=r"line 3: .*outside the workspace"):
        apply_in(ws, wrap("*** Update File: a.txt", "*** Move to: ../a.txt", "-a", "+b"))
    assert (ws / "a.txt").read_text() == "a\n"
