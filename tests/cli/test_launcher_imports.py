"""The ``zuno`` launcher stays small: what it imports to hand a command to the server.

A served command's whole cost is the interpreter, this module and a fork in the
server; an import of typing, json or the CLI here would be paid by every one.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

HEAVY = (
    "typing",
    "json",
    "typer",
    "click",
    "pydantic",
    "asyncio",
    "anyio",
    "rich",
    "zuno.cli.app",
    "zuno.cli.main",
)

PROBE = """
import sys
import zuno.cli.launcher as launcher
import zuno.cli.server_wire as wire
wire.server_place()
wire.unpack(launcher._request(["zuno", "tools"], False))
heavy = {heavy!r}
print(sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy)))
"""


def test_the_launcher_builds_a_request_without_heavy_imports() -> None:
    probe = PROBE.format(heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_a_request_round_trips_through_pack_and_unpack() -> None:
    from zuno.cli.server_wire import pack, unpack

    items = [b"", b"zuno", bytes(range(256)), b"x" * 70000]
    assert unpack(pack(items)) == items
    assert unpack(pack([])) == []


def test_unpack_takes_any_bytes_and_fails_only_with_value_error() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from zuno.cli.server_wire import pack, unpack

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=64) | st.lists(st.binary(max_size=16), max_size=5).map(pack))
    def check(data: bytes) -> None:
        try:
            items = unpack(data)
        except ValueError:
            return
        assert pack(items) == data

    check()


def test_the_server_parses_any_request_fields_or_says_value_error() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from zuno.cli.server_request import parse_request
    from zuno.cli.server_wire import PROTOCOL, pack

    field = (
        st.binary(max_size=24)
        | st.lists(st.binary(max_size=8)).map(pack)
        | st.sampled_from([b"0", b"18", b"tty", b"RLIMIT_NOFILE=1:2", b"A=B"])
        | st.lists(st.sampled_from([b"RLIMIT_CORE=0:0", b"X=1", b"=", b"RLIMIT_CPU=a:b"])).map(pack)
    )
    shaped = st.lists(field, min_size=9, max_size=9).map(lambda rest: [PROTOCOL, b"run", *rest])

    @settings(max_examples=400, deadline=None)
    @given(shaped | st.lists(field, max_size=10))
    def check(fields: list[bytes]) -> None:
        with contextlib.suppress(ValueError):
            parse_request(fields, [])

    check()
