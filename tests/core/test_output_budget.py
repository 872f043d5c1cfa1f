"""Small output budgets: the head and the tail get a fair share, the tail starts a line.

`tool_output.max_bytes` may be as low as 1024. A marker that names a long
artifact path used to take the whole budget, so a command's output showed two
bytes of itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zuno.config.loading import Config, ToolOutputSettings
from zuno.contract.output import ArtifactStore, BoundedOutput, OutputLimits
from zuno.contract.tool import ToolContext
from zuno.tools.shell import ShellArgs, ShellTool


def _parts(text: str) -> tuple[str, str]:
    head, _, rest = text.partition("\n[... ")
    _, _, tail = rest.partition(" ...]\n")
    return head, tail


@settings(max_examples=200, deadline=None)
@given(
    budget=st.integers(min_value=1024, max_value=6000),
    lines=st.integers(min_value=300, max_value=5000),
    path_len=st.integers(min_value=10, max_value=300),
)
def test_head_and_tail_share_any_allowed_budget(
    tmp_path_factory: pytest.TempPathFactory, budget: int, lines: int, path_len: int
) -> None:
    folder = tmp_path_factory.mktemp("o").joinpath(*["d" * 50] * (path_len // 50), "x")
    data = "".join(f"line {i}\n" for i in range(lines)).encode()
    out = BoundedOutput(OutputLimits(max_bytes=budget), folder / "stdout.txt")
    out.feed(data)
    result = out.finish("stdout")
    if not result.truncated:
        return
    assert len(result.text.encode()) <= budget
    head, tail = _parts(result.text)
    assert len(head) + len(tail) >= budget // 4, (budget, len(head), len(tail))
    assert head and tail
    # Neither end starves the other.
    assert min(len(head), len(tail)) * 3 >= max(len(head), len(tail)) - 40
    # The tail starts at a line boundary: its first line is a whole line of the input.
    first = tail.splitlines()[0]
    assert first.startswith("line "), (budget, lines, path_len, tail[:80])
    assert first.startswith("line ") and f"\n{first}\n" in data.decode()


def test_a_command_shows_its_output_under_a_1024_byte_budget(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    config = Config(tool_output=ToolOutputSettings(max_bytes=1024))
    ctx = ToolContext(
        workspace=ws,
        session_id="s",
        call_id="c" * 40,
        attempt=1,
        limits=OutputLimits(max_bytes=1024),
        artifacts=ArtifactStore(tmp_path / ("artifacts-with-a-long-name" * 3)),
        config=config,
    )
    import anyio

    result = anyio.run(ShellTool().run, ShellArgs(command="seq 1 2000"), ctx)
    status, _, stdout = result.output.partition("\n")  # the exit code comes first
    assert status == "[exit code 0]"
    head, tail = _parts(stdout)
    assert len(result.output.encode()) <= 1024
    assert head.splitlines()[:20] == [str(i) for i in range(1, 21)]
    assert tail.split() == [str(i) for i in range(2001 - len(tail.split()), 2001)]
    assert len(tail.split()) >= 20
