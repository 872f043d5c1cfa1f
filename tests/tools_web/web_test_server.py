"""A local HTTP server for the web tool tests: pages, redirects, failures, search APIs.

It listens on 127.0.0.1 only, in a thread. Every route is in ``ROUTES``; the
server counts the requests of each path and keeps the headers it was sent.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
HUGE_SIZE = 20 * 1024 * 1024

PAGE = """<!doctype html>
<html><head><title>Zuno  Test Page</title>
<style>body { color: red }</style>
<script>var secret = "SCRIPT-TEXT";</script></head>
<body>
<nav><a href="/nav-only">NAV-LINK</a></nav>
<h1>Welcome to the page</h1>
<p>First paragraph with a <a href="/docs/intro">relative link</a> and
<a href="https://example.org/abs">an absolute one</a>.</p>
<h2>Code</h2>
<pre><code class="language-python">def f(x):
    return x  # keep   spacing
</code></pre>
<ul><li>alpha</li><li>beta</li></ul>
</body></html>
"""

SEARXNG_RESULTS = {
    "query": "",
    "results": [
        {"title": "First <b>hit</b>", "url": "https://one.example/", "content": "one &amp; only"},
        {"title": "Second", "url": "https://two.example/", "content": "x" * 2000},
        {"title": "Dup of first", "url": "https://one.example/", "content": "dup"},
        {"title": "Third", "url": "https://three.example/", "content": ""},
        {"title": "Fourth", "url": "https://four.example/", "content": "four"},
        {"title": "Fifth", "url": "https://five.example/", "content": "five"},
        {"title": "Sixth", "url": "https://six.example/", "content": "six"},
    ],
}


class Handler(http.server.BaseHTTPRequestHandler):
    server: LocalServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        path = urlsplit(self.path).path
        self.server.hits[path] += 1
        self.server.headers_seen.append((path, dict(self.headers.items())))
        route = ROUTES.get(path)
        if route is None and path.startswith("/redirect/"):
            route = _redirect_chain
        try:
            if route is None:
                self.reply(404, b"<h1>Nothing here</h1><p>No such page.</p>", "text/html")
            else:
                route(self)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading: expected for capped downloads

    def reply(
        self,
        status: int,
        body: bytes,
        content_type: str | None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def query(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}

    def json_body(self) -> Any:
        length = int(self.headers.get("Content-Length", "0"))
        return json.loads(self.rfile.read(length) or b"{}")


class LocalServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.hits: Counter[str] = Counter()
        self.headers_seen: list[tuple[str, dict[str, str]]] = []

    @property
    def port(self) -> int:
        return self.server_address[1]

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def headers_for(self, path: str) -> list[dict[str, str]]:
        return [h for p, h in self.headers_seen if p == path]


@contextmanager
def running_server() -> Iterator[LocalServer]:
    server = LocalServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


# --- routes ------------------------------------------------------------------------


def _page(h: Handler) -> None:
    h.reply(200, PAGE.encode(), "text/html; charset=utf-8")


def _redirect_chain(h: Handler) -> None:
    n = int(urlsplit(h.path).path.rsplit("/", 1)[1])
    target = "/page.html" if n <= 0 else f"/redirect/{n - 1}"
    h.reply(302, b"", None, {"Location": target})


def _loop(h: Handler) -> None:
    h.reply(301, b"", None, {"Location": "/loop"})


def _to_file(h: Handler) -> None:
    h.reply(302, b"", None, {"Location": "file:///etc/passwd"})


def _to_localhost(h: Handler) -> None:
    h.reply(307, b"", None, {"Location": h.server.url("/page.html", "localhost")})


def _flaky(h: Handler) -> None:
    if h.server.hits["/flaky"] == 1:
        h.reply(500, b"<p>Internal trouble</p>", "text/html")
    else:
        h.reply(200, b"recovered on a later attempt", "text/plain; charset=utf-8")


def _always_503(h: Handler) -> None:
    h.reply(503, b"down for maintenance", "text/plain", {"Retry-After": "7"})


def _forbidden(h: Handler) -> None:
    h.reply(403, b'{"error": "no robots"}', "application/json")


def _slow(h: Handler) -> None:
    time.sleep(3)
    h.reply(200, b"too late", "text/plain")


def _trickle(h: Handler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "text/plain")
    h.end_headers()
    for _ in range(30):
        h.wfile.write(b"drip\n")
        h.wfile.flush()
        time.sleep(0.1)


def _huge(h: Handler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "text/plain; charset=utf-8")
    h.send_header("Content-Length", str(HUGE_SIZE))
    h.end_headers()
    line = b"0123456789abcdef" * 4 + b"\n"  # 65 bytes
    chunk = line * 1000
    sent = 0
    while sent < HUGE_SIZE:
        part = chunk[: HUGE_SIZE - sent]
        h.wfile.write(part)
        sent += len(part)


def _png(h: Handler) -> None:
    h.reply(200, PNG, "image/png")


def _octet_png(h: Handler) -> None:
    h.reply(200, PNG * 100, "application/octet-stream")


def _latin1(h: Handler) -> None:
    body = "<html><body><p>Caf\u00e9 cr\u00e8me \u00bd</p></body></html>".encode("latin-1")
    h.reply(200, body, "text/html; charset=ISO-8859-1")


def _meta_charset(h: Handler) -> None:
    html = '<html><head><meta charset="windows-1251"></head><body><p>Привет, мир</p></body></html>'
    h.reply(200, html.encode("cp1251"), "text/html")


def _shift_jis(h: Handler) -> None:
    h.reply(200, "日本語のテキスト".encode("shift_jis"), "text/plain; charset=Shift_JIS")


def _json(h: Handler) -> None:
    h.reply(200, b'{"name": "zuno", "items": [1, 2, 3]}', "application/json")


def _empty(h: Handler) -> None:
    h.reply(200, b"", "text/plain")


def _spa(h: Handler) -> None:
    body = (
        b"<html><head><title>App</title><script>render()</script></head>"
        b"<body><div id=root></div></body></html>"
    )
    h.reply(200, body, "text/html")


def _echo_host(h: Handler) -> None:
    h.reply(200, f"host={h.headers.get('Host')}".encode(), "text/plain")


def _searxng(h: Handler) -> None:
    q = h.query()
    if q.get("format") != "json":
        h.reply(403, b"Forbidden", "text/html")
        return
    query = q.get("q", "")
    if query == "explode":
        h.reply(500, b"engine crashed", "text/plain")
        return
    if query == "refused":
        h.reply(400, b"bad query", "text/plain")
        return
    if query == "nothing":
        h.reply(200, json.dumps({"results": []}).encode(), "application/json")
        return
    if query == "slow":
        time.sleep(3)
    data = dict(SEARXNG_RESULTS, query=query)
    h.reply(200, json.dumps(data).encode(), "application/json")


def _brave(h: Handler) -> None:
    if h.headers.get("X-Subscription-Token") != "brave-test-key":
        h.reply(401, b'{"error": "invalid token"}', "application/json")
        return
    q = h.query()
    count = int(q.get("count", "20"))
    rows = [
        {
            "title": f"Brave <strong>{q['q']}</strong> {i}",
            "url": f"https://b{i}.example/",
            "description": f"d{i}",
        }
        for i in range(count)
    ]
    h.reply(200, json.dumps({"web": {"results": rows}}).encode(), "application/json")


def _tavily(h: Handler) -> None:
    if h.headers.get("Authorization") != "Bearer tavily-test-key":
        h.reply(401, b'{"detail": "unauthorized"}', "application/json")
        return
    body = h.json_body()
    rows = [
        {"title": f"T {body['query']} {i}", "url": f"https://t{i}.example/", "content": "c"}
        for i in range(int(body["max_results"]))
    ]
    h.reply(200, json.dumps({"results": rows}).encode(), "application/json")


ROUTES: dict[str, Callable[[Handler], None]] = {
    "/page.html": _page,
    "/loop": _loop,
    "/to-file": _to_file,
    "/to-localhost": _to_localhost,
    "/flaky": _flaky,
    "/always-503": _always_503,
    "/forbidden": _forbidden,
    "/slow": _slow,
    "/trickle": _trickle,
    "/huge": _huge,
    "/image.png": _png,
    "/download": _octet_png,
    "/latin1": _latin1,
    "/meta-charset": _meta_charset,
    "/shift-jis": _shift_jis,
    "/data.json": _json,
    "/empty": _empty,
    "/spa": _spa,
    "/echo-host": _echo_host,
    "/search": _searxng,
    "/res/v1/web/search": _brave,
    "/tavily/search": _tavily,
}
