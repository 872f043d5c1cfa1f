"""Local servers for the egress proxy tests: static files (a pip index, a git
repository over dumb HTTP) and uploads, on 127.0.0.1, counting what they served."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["Served", "served"]


class Served:
    """A running server: its port and the number of requests it answered."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.requests = 0
        self.uploaded = 0


@contextmanager
def served(root: Path) -> Generator[Served]:
    """Serve root's files (GET) and accept uploads (PUT, counted) on 127.0.0.1."""
    state = Served(0)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            state.requests += 1

        def do_PUT(self) -> None:
            size = int(self.headers.get("Content-Length", "0"))
            state.uploaded += len(self.rfile.read(size))
            self.send_response(204)
            self.end_headers()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler))
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
