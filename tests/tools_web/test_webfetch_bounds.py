"""webfetch stays bounded against hostile servers: stacked encodings and slow answers.

A body encoded twice with gzip (``Content-Encoding: gzip, gzip``) is a few KB
on the wire and gigabytes decoded. The fetch runs in a child process so its
peak memory can be read from the kernel's own account (``ru_maxrss``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest
from web_test_server import LocalServer

from conftest import RuntimeFactory
from zuno.core.declarations import Outcome
from zuno.integrations.web._decoding import BodyDecoder

pytestmark = pytest.mark.anyio

_GIB = 1 << 30


def _gzip_of_text(size: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"zuno " * (1 << 18)
    parts = [z.compress(block) for _ in range(size >> 20)]
    return b"".join([*parts, z.flush()])


def _gzip(data: bytes) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return z.compress(data) + z.flush()


_CHILD = textwrap.dedent(
    """
    import http.server, json, resource, sys, threading
    from pathlib import Path
    import anyio
    from zuno.config.loading import Config
    from zuno.policy.approvals import DenyAll
    from zuno.session.runtime import Runtime
    from zuno.session.builtin_tools import builtin_tools

    body = Path(sys.argv[1]).read_bytes()
    ws = Path(sys.argv[2])

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Encoding", "gzip, gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    cfg = Config.model_validate(
        {
            "web": {"allow_private_networks": True, "allowed_domains": ["127.0.0.1"],
                    "max_download_bytes": 1048576},
            "permission": {"mode": "permissive"},
        }
    )
    rt = Runtime(ws, config=cfg, db_path=ws.parent / "z.db", approver=DenyAll(),
                 tools=builtin_tools(cfg))

    async def main():
        s = rt.open_session()
        url = f"http://127.0.0.1:{srv.server_address[1]}/bomb"
        return await rt.call(s, "webfetch", {"url": url, "format": "text"})

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = anyio.run(main)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"outcome": r.outcome.value, "output": r.output[:300],
                      "data": r.data, "grew_kib": after - before}))
    """
)


def test_a_double_gzip_bomb_is_decoded_within_the_download_cap(tmp_path: Path) -> None:
    bomb = _gzip(_gzip_of_text(_GIB))
    assert len(bomb) < 64 * 1024  # a few KB on the wire ...
    (tmp_path / "bomb").write_bytes(bomb)
    ws = tmp_path / "ws"
    ws.mkdir()
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "bomb"), str(ws)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    report = json.loads(child.stdout.strip().splitlines()[-1])
    # ... a GiB decoded: the fetch must stop at max_download_bytes (1 MiB) and
    # stay far below the decoded size in memory.
    assert report["outcome"] == Outcome.OK.value, report
    assert report["grew_kib"] < 256 * 1024, report
    assert report["data"]["bytes"] == 1 << 20 and report["data"]["download_cut"], report


def test_layers_decode_lazily_piece_by_piece() -> None:
    payload = _gzip(_gzip(b"abc" * 1_000_000))
    decoder = BodyDecoder("gzip, gzip")
    first = next(iter(decoder.feed(payload)))
    assert 0 < len(first) <= 64 * 1024 and set(first) == set(b"abc")
    again = BodyDecoder("gzip,gzip")
    whole = b"".join([*again.feed(payload[:100]), *again.feed(payload[100:]), *again.flush()])
    assert whole == b"abc" * 1_000_000


def test_raw_deflate_and_identity_decode() -> None:
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    data = raw.compress(b"hello " * 100) + raw.flush()
    assert b"".join(BodyDecoder("deflate").feed(data)) == b"hello " * 100
    assert b"".join(BodyDecoder("identity").feed(b"plain")) == b"plain"


@pytest.mark.parametrize("header", ["br", "gzip, gzip, gzip, gzip, gzip", "compress"])
def test_undecodable_or_too_deep_encodings_are_refused(header: str) -> None:
    from zuno.contract.tool import ToolError

    with pytest.raises(ToolError, match="encod"):
        BodyDecoder(header)


async def test_a_timeout_is_not_retried_past_the_web_timeout(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    rt = make_runtime(web={"timeout": 0.3}, replay={"base_delay": 0.0, "attempts": 3})
    session = rt.open_session()
    result = await rt.call(session, "webfetch", {"url": server.url("/slow")})
    assert result.outcome is Outcome.ERROR and result.attempt == 1
    assert [r.attempt for r in rt.store.calls(session.session_id)] == [1]
    assert "did not finish within 0.3 s (web.timeout)" in result.output
