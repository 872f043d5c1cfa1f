"""Edits that cannot clobber, through the Python API (``Runtime``) on a real SQLite file.

Every case judges by the bytes on disk and the call's stored outcome; the
store's own tables are read only to show what was recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import zuno.durability.file_versions as file_versions
from zuno.config.loading import Config
from zuno.contract.calls import CallResult
from zuno.core.declarations import Outcome
from zuno.dispatch.session_state import SessionState
from zuno.durability.file_versions import FileVersions, fingerprint
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


class Bench:
    """A runtime on a SQLite file and helpers to call tools in one of its sessions."""

    def __init__(self, ws: Path, db: Path, config: Config | None = None) -> None:
        self.ws = ws
        self.rt = Runtime(ws, config=config or Config(), db_path=db, approver=ApproveAll())
        self.session = self.rt.open_session()

    async def call(
        self, tool: str, arguments: dict[str, Any], session: SessionState | None = None
    ) -> CallResult:
        return await self.rt.call(session or self.session, tool, arguments)

    async def read(self, path: str, session: SessionState | None = None, **extra: Any) -> None:
        result = await self.call("read", {"path": path, **extra}, session)
        assert result.outcome is Outcome.OK, result.output

    async def write(
        self, path: str, content: str, session: SessionState | None = None
    ) -> CallResult:
        return await self.call("write", {"path": path, "content": content}, session)


@pytest.fixture
def bench(workspace: Path, tmp_path: Path) -> Iterator[Bench]:
    b = Bench(workspace, tmp_path / "api.db")
    yield b
    b.rt.close()


def refused(result: CallResult, *words: str) -> None:
    assert result.outcome is Outcome.ERROR, (result.outcome, result.output)
    for word in words:
        assert word in result.output, result.output


def patch(*lines: str) -> str:
    return "\n".join(("*** Begin Patch", *lines, "*** End Patch")) + "\n"


# --- write --------------------------------------------------------------------------


async def test_read_then_write_is_allowed_and_recorded(bench: Bench) -> None:
    target = bench.ws / "f.txt"
    target.write_text("one\n")
    await bench.read("f.txt")

    result = await bench.write("f.txt", "two\n")

    assert result.outcome is Outcome.OK, result.output
    assert target.read_text() == "two\n"
    seen = FileVersions(bench.rt.store).seen(bench.session.session_id, str(target.resolve()))
    assert seen is not None and seen.how == "wrote"
    assert seen.fingerprint == fingerprint(b"two\n")


async def test_a_write_over_an_outside_change_is_refused(bench: Bench) -> None:
    target = bench.ws / "f.txt"
    target.write_text("one\n")
    await bench.read("f.txt")
    target.write_text("someone else's\n")

    result = await bench.write("f.txt", "mine\n")

    refused(result, "f.txt changed since this session last read it", "Read it again")
    assert target.read_text() == "someone else's\n"


async def test_an_unread_file_is_not_overwritten_but_new_files_are_created(bench: Bench) -> None:
    (bench.ws / "old.txt").write_text("precious\n")

    created = await bench.write("deep/new.txt", "fresh\n")
    result = await bench.write("old.txt", "overwritten\n")

    assert created.outcome is Outcome.OK, created.output
    assert (bench.ws / "deep" / "new.txt").read_text() == "fresh\n"
    refused(result, "old.txt already exists and this session has not read it", "Read it first")
    assert (bench.ws / "old.txt").read_text() == "precious\n"


async def test_a_file_this_session_wrote_can_be_written_again_until_someone_changes_it(
    bench: Bench,
) -> None:
    target = bench.ws / "mine.txt"
    assert (await bench.write("mine.txt", "v1\n")).outcome is Outcome.OK
    assert (await bench.write("mine.txt", "v2\n")).outcome is Outcome.OK
    target.write_text("theirs\n")

    result = await bench.write("mine.txt", "v3\n")

    refused(result, "changed since this session last wrote it")
    assert target.read_text() == "theirs\n"


async def test_another_sessions_write_is_named_and_the_second_writer_loses(bench: Bench) -> None:
    target = bench.ws / "shared.txt"
    target.write_text("h1\n")
    other = bench.rt.open_session()
    await bench.read("shared.txt")
    await bench.read("shared.txt", other)

    first = await bench.write("shared.txt", "from the first\n")
    second = await bench.write("shared.txt", "from the second\n", other)

    assert first.outcome is Outcome.OK, first.output
    refused(second, f"session {bench.session.session_id} wrote it")
    assert target.read_text() == "from the first\n"


async def test_a_child_session_does_not_share_its_parents_reads(bench: Bench) -> None:
    target = bench.ws / "f.txt"
    target.write_text("one\n")
    await bench.read("f.txt")
    child = bench.rt.open_session(parent_call_id="call_parent", depth=1)

    result = await bench.write("f.txt", "child\n", child)

    refused(result, "has not read it")
    assert target.read_text() == "one\n"


# --- what a read covers ------------------------------------------------------------------


async def test_a_page_of_a_file_covers_the_whole_file(bench: Bench) -> None:
    target = bench.ws / "long.txt"
    target.write_text("".join(f"line {n}\n" for n in range(1, 3001)))
    await bench.read("long.txt", offset=1, limit=10)
    with target.open("a") as f:
        f.write("appended far below the page\n")

    result = await bench.write("long.txt", "short\n")

    refused(result, "changed since this session last read it")
    assert target.read_text().endswith("appended far below the page\n")


async def test_a_file_above_the_hash_limit_is_checked_by_its_status(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_versions, "HASH_LIMIT", 1024)
    target = bench.ws / "big.log"
    target.write_text("x" * 4000 + "\n")
    await bench.read("big.log", limit=1)
    seen = FileVersions(bench.rt.store).seen(bench.session.session_id, str(target.resolve()))
    assert seen is not None and seen.fingerprint.startswith("stat:")

    assert (await bench.write("big.log", "y" * 4000 + "\n")).outcome is Outcome.OK
    target.write_text("z\n")  # outside: a new size and a new time
    result = await bench.write("big.log", "w\n")

    refused(result, "changed since this session last wrote it")
    assert target.read_text() == "z\n"


async def test_files_are_known_by_their_real_path_through_symlinks(bench: Bench) -> None:
    real = bench.ws / "real.txt"
    real.write_text("one\n")
    (bench.ws / "link.txt").symlink_to("real.txt")
    await bench.read("link.txt")

    through_real = await bench.write("real.txt", "two\n")
    await bench.read("real.txt")
    real.write_text("outside\n")
    through_link = await bench.write("link.txt", "three\n")

    assert through_real.outcome is Outcome.OK, through_real.output
    refused(through_link, "link.txt changed since this session last read it")
    assert real.read_text() == "outside\n"
    assert (bench.ws / "link.txt").is_symlink()


# --- edit -----------------------------------------------------------------------------------


@pytest.fixture
def edit_bench(workspace: Path, tmp_path: Path) -> Iterator[Bench]:
    b = Bench(workspace, tmp_path / "edit.db", Config.model_validate({"tools": {"edit": True}}))
    yield b
    b.rt.close()


async def test_an_edit_is_anchored_on_its_text_and_needs_no_read(edit_bench: Bench) -> None:
    target = edit_bench.ws / "code.py"
    target.write_text("x = 1\ny = 2\n")

    unread = await edit_bench.call(
        "edit", {"path": "code.py", "old_string": "x = 1", "new_string": "x = 10"}
    )
    assert unread.outcome is Outcome.OK, unread.output
    assert target.read_text() == "x = 10\ny = 2\n"
    target.write_text("x = 10\ny = 20\nz = 3\n")  # outside Zuno, after the edit

    # The text it replaces is still there: nothing unseen is overwritten.
    anchored = await edit_bench.call(
        "edit", {"path": "code.py", "old_string": "z = 3", "new_string": "z = 30"}
    )
    assert anchored.outcome is Outcome.OK, anchored.output
    assert target.read_text() == "x = 10\ny = 20\nz = 30\n"

    # Text that is no longer there is refused, and nothing is written.
    gone = await edit_bench.call(
        "edit", {"path": "code.py", "old_string": "y = 2\n", "new_string": "y = 0\n"}
    )
    assert gone.outcome is not Outcome.OK
    assert "old_string was not found" in gone.output
    assert target.read_text() == "x = 10\ny = 20\nz = 30\n"


async def test_a_refused_edit_reads_as_sentences_without_a_double_stop(edit_bench: Bench) -> None:
    (edit_bench.ws / "code.py").write_text("x = 1\n")

    refused_edit = await edit_bench.call(
        "edit", {"path": "code.py", "old_string": "x  =  1", "new_string": "x = 2"}
    )

    assert refused_edit.outcome is Outcome.BLOCKED
    assert "Copy it exactly" in refused_edit.output
    assert ".." not in refused_edit.output
    assert refused_edit.output.endswith("into old_string. Nothing was changed.")


# --- apply_patch --------------------------------------------------------------------------


async def test_a_patch_is_checked_for_every_file_before_any_is_written(bench: Bench) -> None:
    for name in ("a.txt", "b.txt", "c.txt"):
        (bench.ws / name).write_text(f"{name}\n")
        await bench.read(name)
    (bench.ws / "c.txt").write_text("c.txt\nmore\n")
    text = patch(
        "*** Update File: a.txt",
        "-a.txt",
        "+A",
        "*** Delete File: b.txt",
        "*** Add File: new.txt",
        "+n",
        "*** Delete File: c.txt",
    )

    result = await bench.call("apply_patch", {"patch": text})

    refused(result, "c.txt changed since this session last read it")
    assert (bench.ws / "a.txt").read_text() == "a.txt\n"
    assert (bench.ws / "b.txt").read_text() == "b.txt\n"
    assert not (bench.ws / "new.txt").exists()
    assert (bench.ws / "c.txt").read_text() == "c.txt\nmore\n"


async def test_a_patch_updates_an_unread_file_its_hunks_match(bench: Bench) -> None:
    target = bench.ws / "u.txt"
    target.write_text("one\ntwo\nthree\n")

    result = await bench.call(
        "apply_patch", {"patch": patch("*** Update File: u.txt", " one", "-two", "+TWO")}
    )

    assert result.outcome is Outcome.OK, result.output
    assert target.read_text() == "one\nTWO\nthree\n"
    # The session has now seen what it wrote: a whole-file write may follow.
    again = await bench.write("u.txt", "whole\n")
    assert again.outcome is Outcome.OK, again.output


async def test_a_patch_may_add_files_without_a_read(bench: Bench) -> None:
    result = await bench.call("apply_patch", {"patch": patch("*** Add File: n.txt", "+hi")})

    assert result.outcome is Outcome.OK, result.output
    assert (bench.ws / "n.txt").read_text() == "hi\n"


async def test_a_patch_may_not_delete_or_replace_an_unread_file(bench: Bench) -> None:
    (bench.ws / "d.txt").write_text("unread\n")
    (bench.ws / "e.txt").write_text("unread too\n")

    deleting = await bench.call("apply_patch", {"patch": patch("*** Delete File: d.txt")})
    await bench.read(".")  # an inspection, as the runtime asks after an error
    replacing = await bench.call(
        "apply_patch", {"patch": patch("*** Add File: e.txt", "+replaced")}
    )

    refused(deleting, "d.txt already exists and this session has not read it")
    refused(replacing, "e.txt already exists and this session has not read it")
    assert (bench.ws / "d.txt").read_text() == "unread\n"
    assert (bench.ws / "e.txt").read_text() == "unread too\n"


async def test_a_move_needs_the_source_read_and_records_the_destination(bench: Bench) -> None:
    (bench.ws / "src.txt").write_text("body\n")
    (bench.ws / "taken.txt").write_text("someone's file\n")
    await bench.read("src.txt")

    onto_unread = await bench.call(
        "apply_patch",
        {"patch": patch("*** Update File: src.txt", "*** Move to: taken.txt", "-body", "+moved")},
    )
    refused(onto_unread, "taken.txt already exists and this session has not read it")
    assert (bench.ws / "src.txt").read_text() == "body\n"
    assert (bench.ws / "taken.txt").read_text() == "someone's file\n"

    await bench.read("src.txt")
    moved = await bench.call(
        "apply_patch",
        {"patch": patch("*** Update File: src.txt", "*** Move to: dst.txt", "-body", "+moved")},
    )
    assert moved.outcome is Outcome.OK, moved.output
    assert not (bench.ws / "src.txt").exists()
    # The destination was written by this session: it may be changed again without a read.
    again = await bench.write("dst.txt", "again\n")
    assert again.outcome is Outcome.OK, again.output
    assert (bench.ws / "dst.txt").read_text() == "again\n"


async def test_a_deleted_file_may_be_created_again(bench: Bench) -> None:
    (bench.ws / "gone.txt").write_text("x\n")
    await bench.read("gone.txt")
    deleted = await bench.call("apply_patch", {"patch": patch("*** Delete File: gone.txt")})
    assert deleted.outcome is Outcome.OK, deleted.output
    head = FileVersions(bench.rt.store).head(str(bench.ws / "gone.txt"))
    assert head is not None and head.fingerprint == ""

    created = await bench.write("gone.txt", "back\n")

    assert created.outcome is Outcome.OK, created.output
    assert (bench.ws / "gone.txt").read_text() == "back\n"
