"""Benchmark of ``sandbox.network = "proxy"``: throughput and connection setup.

A local HTTP server on 127.0.0.1 streams ``--size`` bytes (200 MB by default)
from memory. The same ``curl`` runs through the shell tool under bubblewrap
twice per round, round-robin so that the machine's noise falls on both:

- ``network on``: the host's network, curl connects to the server directly;
- ``proxy``: a closed namespace, curl goes through the call's proxy
  (``localhost`` and ``127.0.0.1`` allowed).

Throughput is curl's own figure (``size_download / time_total``), so the
sandbox's start is not counted. Setup is the median ``time_starttransfer`` of
``--requests`` separate curl processes fetching a 1-byte file, one after the
other inside one call: a new connection each time, so through the proxy it
includes the proxy's parse, checks, lookup and upstream connect. The table
gives each median and the proxy's ratio (throughput) or difference (setup)
against network on. Targets: throughput >= 0.8x, setup <= 5 ms added.

Run: ``.venv/bin/python bench/bench_egress.py [--size BYTES] [--repeat N] [--requests N]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import anyio

from zuno.config.sandbox import SandboxSettings
from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import ToolContext
from zuno.tools.shell import ShellArgs, ShellTool

__all__ = ["main"]

_SERVER = """
import http.server, sys
size = int(sys.argv[1])
chunk = b"z" * (1 << 20)

class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        length = size if self.path == "/big" else 1
        self.send_response(200)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        left = length
        while left > 0:
            piece = chunk[: min(left, len(chunk))]
            self.wfile.write(piece)
            left -= len(piece)

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def _server(size: int) -> tuple[subprocess.Popen[str], int]:
    """The local server, in its own process (not sharing this one's interpreter lock)."""
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(size)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline())


class _Config:
    def __init__(self, sandbox: SandboxSettings) -> None:
        self.sandbox = sandbox


async def _shell(workspace: Path, command: str, settings: SandboxSettings) -> str:
    ctx = ToolContext(
        workspace=workspace,
        session_id="bench",
        call_id=uuid.uuid4().hex,
        attempt=1,
        limits=OutputLimits(),
        artifacts=ArtifactStore(workspace.parent / "artifacts"),
        config=_Config(settings),  # type: ignore[arg-type]
    )
    result = await ShellTool().run(ShellArgs(command=command, timeout=600), ctx)
    return result.output


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description="Benchmark the egress proxy.")
    parser.add_argument("--size", type=int, default=200_000_000, help="bytes downloaded")
    parser.add_argument("--repeat", type=int, default=3, help="downloads of each mode")
    parser.add_argument("--requests", type=int, default=30, help="small requests per mode")
    options = parser.parse_args()
    server, port = _server(options.size)
    modes = {
        "network on": SandboxSettings(kind="bubblewrap", network=True),
        "proxy": SandboxSettings(
            kind="bubblewrap", network="proxy", network_allow=("localhost", "127.0.0.1")
        ),
    }
    big = f"curl -sS -o /dev/null -w '%{{speed_download}}\\n' http://localhost:{port}/big"
    small = (
        f"for i in $(seq {options.requests}); do curl -sS -o /dev/null "
        f"-w '%{{time_starttransfer}}\\n' http://localhost:{port}/small; done"
    )
    speeds: dict[str, list[float]] = {m: [] for m in modes}
    setups: dict[str, list[float]] = {m: [] for m in modes}

    async def run() -> None:
        with tempfile.TemporaryDirectory(prefix="zuno-bench-egress-") as tmp:
            workspace = Path(tmp) / "ws"
            workspace.mkdir()
            for _ in range(options.repeat):
                for mode, settings in modes.items():
                    out = await _shell(workspace, big, settings)
                    speeds[mode].append(float(out.splitlines()[1]))
            for mode, settings in modes.items():
                out = await _shell(workspace, small, settings)
                setups[mode] = [float(x) for x in out.splitlines()[1:] if x.strip()]

    try:
        anyio.run(run)
    finally:
        server.kill()
        server.wait()
    on_speed = statistics.median(speeds["network on"])
    on_setup = statistics.median(setups["network on"])
    print(f"{options.size / 1e6:.0f} MB download x{options.repeat}, {options.requests} requests")
    print("| mode | throughput MB/s (median, min, max) | setup ms (median) | vs network on |")
    print("| --- | --- | --- | --- |")
    for mode in modes:
        speed = statistics.median(speeds[mode])
        setup = statistics.median(setups[mode])
        low, high = min(speeds[mode]) / 1e6, max(speeds[mode]) / 1e6
        versus = (
            "1.00x, +0.00 ms"
            if mode == "network on"
            else f"{speed / on_speed:.2f}x, {(setup - on_setup) * 1000:+.2f} ms"
        )
        figures = f"{speed / 1e6:.0f} ({low:.0f}, {high:.0f}) | {setup * 1000:.2f}"
        print(f"| {mode} | {figures} | {versus} |")


if __name__ == "__main__":
    main()
