"""``zuno`` sends its spans to the collector named by ``OTEL_EXPORTER_OTLP_ENDPOINT``.

The collector is a real OTLP/HTTP receiver on 127.0.0.1 that decodes what it
is sent with the OTLP protobuf schema; the CLI is the real command, started
with nothing but the standard variables.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class Collector:
    """Decoded span exports, as ``(resource attributes, span name, span attributes)``."""

    def __init__(self) -> None:
        self.spans: list[tuple[dict[str, Any], str, dict[str, Any]]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()

    def receive(self, path: str, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self._lock:
            self.paths.append(path)
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        attrs = {a.key: _value(a.value) for a in span.attributes}
                        self.spans.append((resource, span.name, attrs))


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture
def collector() -> Iterator[tuple[Collector, str]]:
    found = Collector()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            found.receive(self.path, self.rfile.read(length))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _zuno(workspace: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zuno", *args],
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cli_exports_its_call_spans_over_otlp(
    collector: tuple[Collector, str], workspace: Path
) -> None:
    found, endpoint = collector
    (workspace / "notes.txt").write_text("notes\n")
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    proc = _zuno(workspace, env, "call", "read", '{"path": "notes.txt"}')
    assert proc.returncode == 0, proc.stderr
    # The exporter is flushed before the command exits: the span is here already.
    calls = [(res, attrs) for res, name, attrs in found.spans if name == "zuno.call read"]
    assert len(calls) == 1, found.spans
    resource, attrs = calls[0]
    assert resource["service.name"] == "zuno"
    assert attrs["zuno.outcome"] == "ok" and attrs["zuno.effect"] == "read_only"
    assert found.paths == ["/v1/traces"]

    # Switched off by the standard variable: nothing is sent.
    off = {**env, "OTEL_SDK_DISABLED": "true"}
    proc = _zuno(workspace, off, "call", "read", '{"path": "notes.txt"}')
    assert proc.returncode == 0, proc.stderr
    assert len(found.spans) == 1
