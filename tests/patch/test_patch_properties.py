"""Properties: random edits round-trip through a patch; random text never crashes the parser."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from patch_support import context_for

from zuno.workspace.patch.apply import plan_patch
from zuno.workspace.patch.model import PatchError
from zuno.workspace.patch.parser import parse_patch
from zuno.workspace.patch.textfile import TextFile

# Any character but line breaks (the patch is split on \n and \r\n) and NUL (binary).
_LINE_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)),
    max_size=12,
)


@dataclass(frozen=True)
class Edit:
    """Replace file lines [start, end) by ``new``."""

    start: int
    end: int
    new: list[str]


@st.composite
def files_and_edits(draw: st.DrawFn) -> tuple[list[str], list[Edit]]:
    count = draw(st.integers(min_value=1, max_value=40))
    # A unique suffix per line keeps every context match unambiguous.
    lines = [f"{draw(_LINE_TEXT)}#{i}" for i in range(count)]
    cuts = sorted(draw(st.lists(st.integers(0, count), min_size=2, max_size=10)))
    edits: list[Edit] = []
    previous_end = -1
    for start, end in zip(cuts[::2], cuts[1::2], strict=False):
        if start <= previous_end:  # keep one untouched line between edits
            continue
        new = draw(st.lists(_LINE_TEXT, max_size=4))
        if start == end and not new:
            continue
        edits.append(Edit(start, end, new))
        previous_end = end
    return lines, edits


def _patch_for(path: str, lines: list[str], edits: list[Edit]) -> str:
    out = ["*** Begin Patch", f"*** Update File: {path}"]
    previous_end = 0
    for i, edit in enumerate(edits):
        before = lines[max(previous_end, edit.start - 3) : edit.start]
        # Leave the next chunk at least one line of its own before-context.
        limit = edits[i + 1].start - 1 if i + 1 < len(edits) else len(lines)
        after = lines[edit.end : min(edit.end + 3, limit)]
        if edit.start == edit.end and not before and not after:
            after = lines[edit.end : edit.end + 1]
        out.append("@@")
        out.extend(f" {line}" for line in before)
        out.extend(f"-{line}" for line in lines[edit.start : edit.end])
        out.extend(f"+{line}" for line in edit.new)
        out.extend(f" {line}" for line in after)
        previous_end = edit.end + len(after)
    out.append("*** End Patch")
    return "\n".join(out)


def _expected(lines: list[str], edits: list[Edit]) -> list[str]:
    out: list[str] = []
    done = 0
    for edit in edits:
        out.extend(lines[done : edit.start])
        out.extend(edit.new)
        done = edit.end
    out.extend(lines[done:])
    return out


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    case=files_and_edits(),
    eol=st.sampled_from(["\n", "\r\n"]),
    bom=st.booleans(),
    final_newline=st.booleans(),
)
def test_random_edits_round_trip_through_a_patch(
    tmp_path: Path,
    case: tuple[list[str], list[Edit]],
    eol: str,
    bom: bool,
    final_newline: bool,
) -> None:
    lines, edits = case
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    original = TextFile(lines, eol, bom, final_newline).encode()
    (workspace / "f.txt").write_bytes(original)
    patch = _patch_for("f.txt", lines, edits)
    if not edits:
        return
    plan = plan_patch(patch, context_for(workspace).resolve_writable)
    # A one-line file without a final newline has no ending to keep: new lines get LF.
    kept_eol = eol if len(lines) > 1 or final_newline else "\n"
    expected = TextFile(_expected(lines, edits), kept_eol, bom, final_newline).encode()
    written = {change.path.name: change.data for change in plan.changes}
    assert written.get("f.txt", original) == expected


_PATCH_TOKENS = st.sampled_from(
    [
        "*** Begin Patch",
        "*** End Patch",
        "*** Add File: a.txt",
        "*** Delete File: a.txt",
        "*** Update File: a.txt",
        "*** Move to: b.txt",
        "*** End of File",
        "@@",
        "@@ ctx",
        "@@ -1,2 +1,2 @@ x",
        " a",
        "-a",
        "+b",
        "",
        "<<'EOF'",
        "EOF",
        "apply_patch <<EOF",
    ]
)


@settings(max_examples=400)
@given(st.lists(st.one_of(_PATCH_TOKENS, st.text(max_size=20)), max_size=25))
def test_parser_raises_only_patch_error(parts: list[str]) -> None:
    with contextlib.suppress(PatchError):
        parse_patch("\n".join(parts))


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_PATCH_TOKENS, max_size=20))
def test_planning_raises_only_patch_error(tmp_path: Path, parts: list[str]) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "a.txt").write_text("a\nctx\na\nx\n")
    text = "\n".join(["*** Begin Patch", *parts, "*** End Patch"])
    with contextlib.suppress(PatchError):
        plan_patch(text, context_for(workspace).resolve_writable)
