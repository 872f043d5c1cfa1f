"""The argument models (fuzzed), their schemas, and the ``web`` configuration section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from zuno.config.loading import Config, ConfigError, load_config
from zuno.config.trust import trust
from zuno.config.web import MAX_DOWNLOAD_CEILING
from zuno.core.declarations import BlockKind, Outcome
from zuno.dispatch.dispatcher import CallRequest
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime
from zuno.tools.web import WebFetchArgs, WebFetchTool
from zuno.tools.web_search import MAX_QUERIES, MAX_RESULTS, WebSearchArgs, WebSearchTool

json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(), st.text(max_size=20)
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


def _dicts(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from([*keys, "extra"]), json_values, max_size=4)


@settings(max_examples=400)
@given(_dicts(["url", "format", "max_bytes"]))
def test_fetch_args_accept_only_what_the_schema_says(raw: dict[str, Any]) -> None:
    try:
        args = WebFetchArgs.model_validate(raw)
    except ValidationError:
        return
    assert set(raw) <= {"url", "format", "max_bytes"}
    assert 1 <= len(args.url) <= 8192
    assert args.format in ("markdown", "text", "raw")
    assert args.max_bytes is None or 1 <= args.max_bytes <= MAX_DOWNLOAD_CEILING


@settings(max_examples=400)
@given(
    st.one_of(
        _dicts(["queries", "max_results"]),
        st.fixed_dictionaries(
            {"queries": st.lists(st.text(max_size=30), max_size=7)},
            optional={"max_results": st.integers(-3, 14)},
        ),
    )
)
def test_search_args_accept_only_what_the_schema_says(raw: dict[str, Any]) -> None:
    try:
        args = WebSearchArgs.model_validate(raw)
    except ValidationError:
        return
    assert 1 <= len(args.queries) <= MAX_QUERIES
    assert all(q and q == q.strip() and len(q) <= 400 for q in args.queries)
    assert 1 <= args.max_results <= MAX_RESULTS


def test_schemas_state_their_limits() -> None:
    fetch = WebFetchTool().schema()
    assert fetch["required"] == ["url"]
    assert fetch["properties"]["format"]["default"] == "markdown"
    assert set(fetch["properties"]["format"]["enum"]) == {"markdown", "text", "raw"}
    search = WebSearchTool().schema()
    assert search["properties"]["queries"]["maxItems"] == MAX_QUERIES
    assert search["properties"]["max_results"]["maximum"] == MAX_RESULTS
    for tool in (WebFetchTool(), WebSearchTool()):
        assert len(tool.description) < 900
    assert "5 MiB" in WebFetchTool.description and "30 s" in WebFetchTool.description


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=60))
def test_any_non_http_url_is_refused_before_the_network(raw: str) -> None:
    if "http" in raw.lower() or not raw.strip():
        return
    result = anyio.run(_fetch_once, raw)
    assert result.outcome is Outcome.BLOCKED, (raw, result.output)
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "failed inside Zuno" not in result.output


_RUNTIME: Runtime | None = None


async def _fetch_once(url: str) -> Any:
    global _RUNTIME
    if _RUNTIME is None:
        import tempfile

        root = Path(tempfile.mkdtemp())
        (root / "ws").mkdir()
        _RUNTIME = Runtime(
            root / "ws", config=Config(), db_path=root / "z.db", approver=ApproveAll()
        )
    session = _RUNTIME.open_session()
    (result,) = await _RUNTIME.dispatch(session, [CallRequest("webfetch", {"url": url})])
    return result


# --- configuration ------------------------------------------------------------------


def write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data))


def test_web_defaults() -> None:
    web = Config().web
    assert web.timeout == 30 and web.max_download_bytes == 5 * 1024 * 1024
    assert web.max_redirects == 5 and web.allow_private_networks is False
    assert web.search is None


def test_web_section_loads_and_normalizes(workspace: Path) -> None:
    write(
        workspace / "zuno.json",
        {
            "web": {
                "timeout": 5,
                "blocked_domains": ["*.Example.COM", ".tracker.net."],
                "search": {"kind": "searxng", "base_url": "http://127.0.0.1:8888/"},
            }
        },
    )
    trust(workspace)  # web.search is honoured from a trusted folder only
    web = load_config(workspace).web
    assert web.timeout == 5
    assert web.blocked_domains == ["example.com", "tracker.net"]
    assert web.search is not None and web.search.url == "http://127.0.0.1:8888"
    assert web.search.key_env is None


def test_backend_defaults() -> None:
    brave = Config.model_validate({"web": {"search": {"kind": "brave"}}}).web.search
    assert brave is not None
    assert brave.url == "https://api.search.brave.com" and brave.key_env == "BRAVE_API_KEY"
    tavily = Config.model_validate(
        {"web": {"search": {"kind": "tavily", "api_key_env": "MY_KEY"}}}
    ).web.search
    assert tavily is not None and tavily.key_env == "MY_KEY"


@pytest.mark.parametrize(
    ("web", "expected"),
    [
        ({"search": {"kind": "searxng"}}, "base_url is required"),
        ({"search": {"kind": "bing"}}, "web.search.kind"),
        ({"search": {"kind": "brave", "base_url": "ftp://x"}}, "http:// or https://"),
        ({"timeout": 0}, "web.timeout"),
        ({"max_download_bytes": 10**12}, "web.max_download_bytes"),
        ({"allowed_domains": ["https://example.com/"]}, "not a domain"),
        ({"proxy": "x"}, "unknown key 'web.proxy'"),
    ],
)
def test_bad_web_settings_name_the_key(workspace: Path, web: dict[str, Any], expected: str) -> None:
    write(workspace / "zuno.json", {"web": web})
    with pytest.raises(ConfigError, match=r"zuno\.json") as info:
        load_config(workspace)
    assert expected in str(info.value)
