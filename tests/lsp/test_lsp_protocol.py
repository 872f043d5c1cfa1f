"""Framing, positions and settings: the parts of the client that need no server."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from zuno.config.loading import Config, ConfigError, validate_config
from zuno.config.lsp import LspSettings
from zuno.execution.server_launch import find_program
from zuno.integrations.lsp.documents import path_to_uri, to_character, to_utf16, uri_to_path
from zuno.integrations.lsp.framing import FrameDecoder, FramingError, encode_message
from zuno.integrations.lsp.watch import CHANGED, CREATED, DELETED, WorkspaceScan


def test_a_message_round_trips_whatever_the_chunking() -> None:
    messages = [
        {"jsonrpc": "2.0", "id": 1, "result": {"text": "héllo \U0001f600"}},
        {"jsonrpc": "2.0", "method": "window/logMessage", "params": {"message": "x" * 5000}},
    ]
    data = b"".join(encode_message(m) for m in messages)
    for size in (1, 2, 7, 64, len(data)):
        decoder = FrameDecoder()
        got: list[dict[str, Any]] = []
        for i in range(0, len(data), size):
            got += decoder.feed(data[i : i + size])
        assert got == messages, size


def test_the_length_counts_bytes_not_characters() -> None:
    frame = encode_message({"text": "\U0001f600"})
    header, body = frame.split(b"\r\n\r\n")
    assert header == b"Content-Length: %d" % len(body)
    assert json.loads(body) == {"text": "\U0001f600"}


def test_extra_headers_are_accepted() -> None:
    body = b'{"id":3,"result":null}'
    frame = (
        b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n"
        b"content-length: %d\r\n\r\n" % len(body) + body
    )
    assert FrameDecoder().feed(frame) == [{"id": 3, "result": None}]


@pytest.mark.parametrize(
    "data",
    [
        b"this is not a header\r\n\r\n",
        b"Content-Length: twelve\r\n\r\n",
        b"Content-Length: 4\r\n\r\nnope",
        b"x" * 10000,
    ],
)
def test_a_broken_stream_is_an_error(data: bytes) -> None:
    with pytest.raises(FramingError):
        FrameDecoder().feed(data)


def test_columns_count_characters_and_servers_count_utf16() -> None:
    line = 'pair = ("\U0001f600", greet("ann"))'
    column = line.index("greet") + 1  # 1-based, in characters
    offset = to_utf16(line, column)
    assert offset == column  # one more unit for the emoji, one less for 0-based
    assert to_character(line, offset) == column
    assert to_utf16("abc", 1) == 0
    assert to_character("abc", 99) == 4


def test_uris_and_paths() -> None:
    p = Path("/tmp/a dir/ü.py")
    uri = path_to_uri(p)
    assert uri.startswith("file:///tmp/a%20dir/")
    assert uri_to_path(uri) == p
    assert uri_to_path("untitled:Untitled-1") is None


def test_python_is_served_by_pyright_unless_configured() -> None:
    default = LspSettings()
    server = default.server_for(Path("x.py"))
    assert server is not None and server.command == ["pyright-langserver", "--stdio"]
    assert server.install is not None and "pip install pyright" in server.install
    assert default.server_for(Path("x.txt")) is None
    custom = LspSettings.model_validate({"servers": {".PY": {"command": ["pylsp"]}}})
    chosen = custom.server_for(Path("x.py"))
    assert chosen is not None and chosen.command == ["pylsp"]
    assert custom.language_id(Path("x.py"), chosen) == "python"
    still = custom.server_for(Path("x.pyi"))
    assert still is not None and still.command[0] == "pyright-langserver"


@pytest.mark.parametrize(
    "lsp",
    [
        {"servers": {"py": {"command": ["pylsp"]}}},
        {"servers": {".py": {"command": []}}},
        {"servers": {".py": {"command": [" "]}}},
        {"request_timeout": 0},
        {"startup_timeout": 601},
        {"bogus": 1},
    ],
)
def test_bad_lsp_settings_are_config_errors(lsp: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="lsp"):
        validate_config({"lsp": lsp}, "zuno.json")


def test_config_default() -> None:
    assert Config().lsp == LspSettings()
    assert Config().lsp.request_timeout == 30


def test_programs_are_found_beside_python_first(tmp_path: Path) -> None:
    assert find_program(sys.executable) == sys.executable
    assert find_program(str(tmp_path / "missing")) is None
    assert find_program("surely-no-such-language-server") is None
    beside = Path(sys.executable).parent / "python"
    if beside.exists():
        assert find_program("python") == str(beside)


def test_a_scan_reports_what_changed_since_the_last(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "kept.py").write_text("a = 1\n")
    (tmp_path / "pkg" / "edited.py").write_text("b = 1\n")
    (tmp_path / "gone.py").write_text("c = 1\n")
    (tmp_path / "notes.txt").write_text("not watched\n")
    for skipped in (".git", "node_modules", "__pycache__"):
        (tmp_path / skipped).mkdir()
    scan = WorkspaceScan(tmp_path, [".py"])
    assert scan.changes() == []  # the first scan is the baseline
    (tmp_path / "pkg" / "edited.py").write_text("b = 22\n")
    (tmp_path / "gone.py").unlink()
    (tmp_path / "new.py").write_text("d = 1\n")
    (tmp_path / "notes.txt").write_text("changed, but not watched\n")
    for skipped in (".git", "node_modules", "__pycache__"):
        (tmp_path / skipped / "hidden.py").write_text("e = 1\n")
    assert scan.changes() == sorted(
        [
            (tmp_path / "gone.py", DELETED),
            (tmp_path / "new.py", CREATED),
            (tmp_path / "pkg" / "edited.py", CHANGED),
        ]
    )
    assert scan.changes() == []
