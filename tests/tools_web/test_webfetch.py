"""``webfetch`` through the dispatcher, against a local HTTP server."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from web_test_server import HUGE_SIZE, LocalServer, running_server

from conftest import RuntimeFactory
from zuno.core.declarations import READ_ONLY_SAFE_PARALLEL, BlockKind, Outcome
from zuno.dispatch.dispatcher import CallResult
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


async def fetch(rt: Runtime, **args: object) -> CallResult:
    session = rt.open_session()
    return await rt.call(session, "webfetch", dict(args))


# --- declaration and surface -------------------------------------------------------


async def test_in_the_default_surface_and_declared_as_inspection(
    make_runtime: RuntimeFactory,
) -> None:
    rt = make_runtime(web={"search": {"kind": "searxng", "base_url": "http://127.0.0.1:9"}})
    assert {"webfetch", "web_search"} <= set(rt.surface().names)
    assert {"webfetch", "web_search"} <= set(rt.surface("explore").names)
    for name in ("webfetch", "web_search"):
        tool = rt.registry.get(name)
        assert tool is not None and tool.declaration == READ_ONLY_SAFE_PARALLEL


async def test_strict_mode_prompts_for_an_unlisted_host_unless_allowed(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    # The runtime's approver denies everything: a prompted call is blocked.
    asked = make_runtime(permission={"mode": "strict"})
    listed = make_runtime(permission={"mode": "strict"}, web={"allowed_domains": ["127.0.0.1"]})
    ruled = make_runtime()
    assert ruled.config.permission.mode == "strict"
    blocked = await fetch(asked, url=server.url("/page.html"))
    assert blocked.block_kind is BlockKind.DENIED and "allowed_domains" in blocked.output
    for rt in (listed, ruled):
        result = await fetch(rt, url=server.url("/page.html"))
        assert result.outcome is Outcome.OK, result.output


async def test_tools_map_switches_webfetch_off(make_runtime: RuntimeFactory) -> None:
    rt = make_runtime(tools={"webfetch": False})
    assert "webfetch" not in rt.surface().names
    result = await fetch(rt, url="https://example.org/")
    assert result.block_kind is BlockKind.UNAVAILABLE


# --- HTML ------------------------------------------------------------------------------


async def test_html_becomes_markdown(make_runtime: RuntimeFactory, server: LocalServer) -> None:
    result = await fetch(make_runtime(), url=server.url("/page.html"))
    out = result.output
    assert out.startswith(f"URL: {server.url('/page.html')}\n")
    assert "Title: Zuno Test Page" in out
    assert "# Welcome to the page" in out and "## Code" in out
    assert "[relative link][1]" in out and "[an absolute one][2]" in out
    assert f"[1]: {server.url('/docs/intro')}" in out
    assert "[2]: https://example.org/abs" in out
    assert "```python\ndef f(x):\n    return x  # keep   spacing\n```" in out
    assert "- alpha\n- beta" in out
    for dropped in ("SCRIPT-TEXT", "color: red", "NAV-LINK", "<p>", "<h1>"):
        assert dropped not in out
    assert result.data is not None and result.data["title"] == "Zuno Test Page"


async def test_text_format_has_no_markdown(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    result = await fetch(make_runtime(), url=server.url("/page.html"), format="text")
    out = result.output
    assert "Welcome to the page" in out and "# Welcome" not in out
    assert "relative link [1]" in out and "```" not in out
    assert f"[1] {server.url('/docs/intro')}" in out


async def test_raw_format_keeps_the_source(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    result = await fetch(make_runtime(), url=server.url("/page.html"), format="raw")
    assert "<h1>Welcome to the page</h1>" in result.output
    assert 'var secret = "SCRIPT-TEXT"' in result.output


async def test_script_only_page_says_so(make_runtime: RuntimeFactory, server: LocalServer) -> None:
    result = await fetch(make_runtime(), url=server.url("/spa"))
    assert result.outcome is Outcome.OK
    assert "no readable text without JavaScript" in result.output
    assert "format=raw" in result.output


async def test_json_and_empty_bodies(make_runtime: RuntimeFactory, server: LocalServer) -> None:
    rt = make_runtime()
    data = await fetch(rt, url=server.url("/data.json"))
    assert data.output.endswith('{"name": "zuno", "items": [1, 2, 3]}')
    assert "Content: application/json" in data.output
    empty = await fetch(rt, url=server.url("/empty"))
    assert empty.outcome is Outcome.OK and "The response body is empty" in empty.output


# --- redirects -------------------------------------------------------------------------


async def test_redirects_are_followed_and_named(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    result = await fetch(make_runtime(), url=server.url("/redirect/2"))
    assert result.outcome is Outcome.OK
    assert result.output.startswith(f"URL: {server.url('/page.html')}\n")
    chain = " -> ".join(server.url(f"/redirect/{n}") for n in (2, 1, 0))
    assert f"Redirected from: {chain}" in result.output
    assert result.data is not None and result.data["final_url"] == server.url("/page.html")


async def test_redirects_are_bounded(make_runtime: RuntimeFactory, server: LocalServer) -> None:
    rt = make_runtime(web={"max_redirects": 3})
    ok = await fetch(rt, url=server.url("/redirect/2"))  # three redirects
    assert ok.outcome is Outcome.OK
    too_many = await fetch(rt, url=server.url("/redirect/3"))
    assert too_many.outcome is Outcome.ERROR
    assert "stopped after 3 redirects (web.max_redirects)" in too_many.output
    loop = await fetch(rt, url=server.url("/loop"))
    assert loop.outcome is Outcome.ERROR and "redirects" in loop.output


async def test_redirect_to_another_scheme_is_refused(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    result = await fetch(make_runtime(), url=server.url("/to-file"))
    # A request was sent, so this is an error rather than a refusal.
    assert result.outcome is Outcome.ERROR
    assert "file:///etc/passwd" in result.output and "http(s) redirects only" in result.output


async def test_redirect_to_a_blocked_domain_is_refused(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    rt = make_runtime(web={"blocked_domains": ["localhost"]})
    result = await fetch(rt, url=server.url("/to-localhost"))
    assert result.outcome is Outcome.ERROR
    assert "localhost (a redirect to" in result.output and "blocked_domains" in result.output
    assert server.hits["/page.html"] == 0 or all(
        h.get("Host", "").startswith("127.0.0.1") for h in server.headers_for("/page.html")
    )


# --- the network guard -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("localhost", "loopback"),
        ("[::1]", "loopback"),
        ("10.1.2.3", "private-network"),
        ("192.168.0.10", "private-network"),
        ("169.254.169.254", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("[::ffff:127.0.0.1]", "loopback"),
        ("100.64.0.1", "non-public"),
    ],
)
async def test_private_addresses_are_refused_by_default(
    make_runtime: RuntimeFactory, server: LocalServer, host: str, kind: str
) -> None:
    rt = make_runtime(web={"allow_private_networks": False})
    before = sum(server.hits.values())
    result = await fetch(rt, url=f"http://{host}:{server.port}/page.html")
    assert result.outcome is Outcome.BLOCKED, result.output
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert f"a {kind} address" in result.output
    assert '"allow_private_networks": true' in result.output
    assert sum(server.hits.values()) == before  # nothing reached the server


async def test_the_default_config_refuses_private_addresses(
    workspace: Path, tmp_path: Path, server: LocalServer
) -> None:
    rt = Runtime(workspace, db_path=tmp_path / "z.db")
    assert rt.config.web.allow_private_networks is False
    result = await fetch(rt, url=server.url("/page.html"))
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS


async def test_connection_goes_to_the_checked_address_with_the_name_as_host(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    result = await fetch(make_runtime(), url=server.url("/echo-host", "localhost"))
    assert result.outcome is Outcome.OK
    assert result.output.endswith(f"host=localhost:{server.port}")


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "data:text/plain,hello",
        "ftp://example.org/file",
        "javascript:alert(1)",
        "gopher://example.org/",
        "http://",
    ],
)
async def test_other_schemes_are_refused(make_runtime: RuntimeFactory, url: str) -> None:
    result = await fetch(make_runtime(), url=url)
    assert result.outcome is Outcome.BLOCKED
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS


async def test_a_url_without_scheme_gets_a_suggestion(make_runtime: RuntimeFactory) -> None:
    result = await fetch(make_runtime(), url="example.com/docs")
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "did you mean https://example.com/docs?" in result.output


async def test_domain_lists(make_runtime: RuntimeFactory, server: LocalServer) -> None:
    allowed = make_runtime(web={"allowed_domains": ["example.org"]})
    refused = await fetch(allowed, url=server.url("/page.html", "localhost"))
    assert refused.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "not in web.allowed_domains (example.org)" in refused.output
    blocked = make_runtime(web={"blocked_domains": ["*.LOCALHOST", "localhost"]})
    result = await fetch(blocked, url=server.url("/page.html", "localhost"))
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "web.blocked_domains" in result.output
    ok = await fetch(blocked, url=server.url("/page.html"))
    assert ok.outcome is Outcome.OK


async def test_unknown_host_is_an_error(make_runtime: RuntimeFactory) -> None:
    result = await fetch(make_runtime(), url="http://no-such-host.invalid/")
    assert result.outcome is Outcome.ERROR
    assert "cannot resolve host 'no-such-host.invalid'" in result.output


# --- HTTP failures and retries ----------------------------------------------------------


async def test_404_is_an_error_with_status_and_page_text(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    rt = make_runtime()
    result = await fetch(rt, url=server.url("/missing"))
    assert result.outcome is Outcome.ERROR and result.attempt == 1
    assert f"HTTP 404 Not Found from {server.url('/missing')}" in result.output
    assert "Nothing here No such page." in result.output and "Check the URL" in result.output


async def test_403_says_access_is_refused(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    result = await fetch(make_runtime(), url=server.url("/forbidden"))
    assert result.outcome is Outcome.ERROR and result.attempt == 1
    assert "HTTP 403 Forbidden" in result.output and "no robots" in result.output


async def test_500_is_retried_by_the_dispatcher(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    rt = make_runtime()
    session = rt.open_session()
    result = await rt.call(session, "webfetch", {"url": server.url("/flaky")})
    assert result.outcome is Outcome.OK and result.attempt == 2
    assert "recovered on a later attempt" in result.output
    rows = rt.store.calls(session.session_id)
    assert [(r.attempt, r.outcome) for r in rows] == [(1, "error"), (2, "ok")]
    assert "HTTP 500" in (rows[0].result or "")


async def test_persistent_503_fails_after_the_configured_attempts(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    rt = make_runtime(replay={"base_delay": 0.0, "attempts": 2})
    session = rt.open_session()
    result = await rt.call(session, "webfetch", {"url": server.url("/always-503")})
    assert result.outcome is Outcome.ERROR and result.attempt == 2
    assert "HTTP 503 Service Unavailable" in result.output
    assert "down for maintenance" in result.output and "wait 7 s" in result.output


async def test_slow_server_times_out_once(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    rt = make_runtime(web={"timeout": 0.3}, replay={"base_delay": 0.0, "attempts": 2})
    session = rt.open_session()
    for path in ("/slow", "/trickle"):
        result = await rt.call(session, "webfetch", {"url": server.url(path)})
        assert result.outcome is Outcome.ERROR, path
        assert result.attempt == 1  # web.timeout bounds the fetch: no second attempt
        assert "did not finish within 0.3 s (web.timeout)" in result.output


async def test_connection_refused_is_transient(make_runtime: RuntimeFactory) -> None:
    rt = make_runtime(replay={"base_delay": 0.0, "attempts": 2})
    result = await fetch(rt, url="http://127.0.0.1:9/")
    assert result.outcome is Outcome.ERROR and result.attempt == 2
    assert "cannot connect" in result.output


# --- size limits ----------------------------------------------------------------------------


async def test_max_bytes_cuts_the_download_and_says_so(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    result = await fetch(make_runtime(), url=server.url("/huge"), max_bytes=100_000)
    assert result.outcome is Outcome.OK
    assert result.data is not None
    assert result.data["bytes"] == 100_000 and result.data["download_cut"] is True
    assert "[Download stopped at 97.7 KiB of 20.0 MiB" in result.output


async def test_configured_cap_is_the_ceiling_and_output_is_bounded(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    rt = make_runtime(web={"max_download_bytes": 1024 * 1024}, tool_output={"max_bytes": 4096})
    result = await fetch(rt, url=server.url("/huge"), max_bytes=10 * 1024 * 1024)
    assert result.data is not None and result.data["bytes"] == 1024 * 1024
    assert len(result.output.encode()) < 8192
    assert result.artifact is not None
    saved = await anyio.Path(result.artifact).read_text()
    assert saved.startswith(f"URL: {server.url('/huge')}")
    assert len(saved) > 1024 * 1024 and len(saved) < HUGE_SIZE


# --- binary and encodings ---------------------------------------------------------------------


async def test_images_are_described_not_dumped(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    result = await fetch(make_runtime(), url=server.url("/image.png"))
    assert result.outcome is Outcome.OK
    assert "Not text: image/png; looks like PNG image" in result.output
    assert "PNG\r\n" not in result.output and "IHDR" not in result.output
    assert len(result.output) < 600


async def test_undeclared_binary_is_sniffed(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    result = await fetch(make_runtime(), url=server.url("/download"), format="raw")
    assert "Not text: application/octet-stream; looks like PNG image" in result.output
    assert result.data is not None and result.data["binary"] == "PNG image"


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("/latin1", "Café crème ½"),
        ("/meta-charset", "Привет, мир"),
        ("/shift-jis", "日本語のテキスト"),
    ],
)
async def test_non_utf8_charsets_are_decoded(
    make_runtime: RuntimeFactory, server: LocalServer, path: str, text: str
) -> None:
    result = await fetch(make_runtime(), url=server.url(path))
    assert result.outcome is Outcome.OK
    assert text in result.output
    assert "\ufffd" not in result.output


# --- TLS ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, list[str]]]:
    """An HTTPS server with a self-signed certificate for localhost; it records SNI names."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=DNS:localhost"),
        ],
        check=True,
        capture_output=True,
    )
    names: list[str] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda _sock, name, _ctx: names.append(name or "")  # type: ignore[assignment]
    with running_server() as srv:
        srv.socket = context.wrap_socket(srv.socket, server_side=True)
        yield srv.port, names


async def test_tls_uses_the_host_name_and_an_untrusted_certificate_is_not_retried(
    make_runtime: RuntimeFactory, tls_server: tuple[int, list[str]]
) -> None:
    port, names = tls_server
    result = await fetch(make_runtime(), url=f"https://localhost:{port}/page.html")
    # The connection went to a checked address, yet the TLS server name (and so
    # the certificate check) is the URL's host name.
    assert names and set(names) == {"localhost"}
    assert result.outcome is Outcome.ERROR and result.attempt == 1
    assert "TLS failure" in result.output and "CERTIFICATE_VERIFY_FAILED" in result.output
