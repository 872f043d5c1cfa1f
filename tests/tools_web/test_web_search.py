"""``web_search`` through the dispatcher, against fake SearXNG, Brave and Tavily APIs."""

from __future__ import annotations

import time

import pytest
from web_test_server import LocalServer

from conftest import RuntimeFactory
from zuno.core.declarations import BlockKind, Outcome
from zuno.dispatch.dispatcher import CallResult
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


async def search(rt: Runtime, *queries: str, **args: object) -> CallResult:
    session = rt.open_session()
    return await rt.call(session, "web_search", {"queries": list(queries), **args})


def searxng(rt_factory: RuntimeFactory, server: LocalServer, **web: object) -> Runtime:
    return rt_factory(web={"search": {"kind": "searxng", "base_url": server.url("")}, **web})


async def test_without_backend_it_is_not_offered_and_says_which_key_to_set(
    make_runtime: RuntimeFactory,
) -> None:
    rt = make_runtime()
    for agent in ("build", "explore"):
        surface = rt.surface(agent)
        assert "web_search" not in surface.names
        assert "web.search" in dict(surface.withheld)["web_search"]
    result = await search(rt, "anything")
    assert result.outcome is Outcome.BLOCKED and result.block_kind is BlockKind.UNAVAILABLE
    assert "no search backend is configured" in result.output
    assert '"kind": "searxng", "base_url"' in result.output


async def test_searxng_results_are_numbered_and_cleaned(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    result = await search(searxng(make_runtime, server), "zuno runtime", max_results=3)
    assert result.outcome is Outcome.OK, result.output
    out = result.output
    assert out.startswith('Web search (searxng), 1 query.\n\n## 1. "zuno runtime"\n')
    assert "1. First hit\n   https://one.example/\n   one & only" in out
    # The repeated URL is dropped, so the third result is "Third"; it has no snippet.
    assert "3. Third\n   https://three.example/" in out
    assert "Dup of first" not in out and "Fourth" not in out
    second = out.split("2. Second\n", 1)[1].split("\n")[1]
    assert second.endswith("...") and len(second) < 420
    assert result.data is not None
    (answer,) = result.data["queries"]
    assert [r["url"] for r in answer["results"]] == [
        "https://one.example/",
        "https://two.example/",
        "https://three.example/",
    ]


async def test_queries_run_concurrently(make_runtime: RuntimeFactory, server: LocalServer) -> None:
    rt = searxng(make_runtime, server)
    start = time.monotonic()
    result = await search(rt, "slow", "slow", "slow")
    elapsed = time.monotonic() - start
    assert result.outcome is Outcome.OK
    assert result.output.count("1. First hit") == 3
    assert elapsed < 6  # three 3-second answers, together


async def test_a_failed_query_does_not_hide_the_others(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    result = await search(searxng(make_runtime, server), "good", "explode", "nothing")
    assert result.outcome is Outcome.OK and result.attempt == 1
    out = result.output
    assert '## 1. "good"\n1. First hit' in out
    assert '## 2. "explode"\nFailed: HTTP 500' in out and "engine crashed" in out
    assert '## 3. "nothing"\nNo results.' in out
    assert result.data is not None
    assert [q["error"] is None for q in result.data["queries"]] == [True, False, True]


async def test_all_transient_failures_are_retried(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    rt = searxng(make_runtime, server, timeout=0.5)
    rt.config.replay.attempts = 2
    session = rt.open_session()
    result = await rt.call(session, "web_search", {"queries": ["explode", "slow"]})
    assert result.outcome is Outcome.ERROR and result.attempt == 2
    assert "every query failed" in result.output
    assert "HTTP 500" in result.output and "within 0.5 s" in result.output
    assert [r.attempt for r in rt.store.calls(session.session_id)] == [1, 2]


async def test_all_permanent_failures_are_not_retried(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    result = await search(searxng(make_runtime, server), "refused", "explode")
    # One failure will not pass (HTTP 400): the call is not attempted again.
    assert result.outcome is Outcome.ERROR and result.attempt == 1
    assert "HTTP 400" in result.output


async def test_strict_mode_does_not_prompt(
    make_runtime: RuntimeFactory, server: LocalServer
) -> None:
    rt = searxng(make_runtime, server)
    assert rt.config.permission.mode == "strict"
    result = await search(rt, "q")
    assert result.outcome is Outcome.OK


async def test_brave_sends_the_key_and_count(
    make_runtime: RuntimeFactory, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZUNO_TEST_BRAVE", "brave-test-key")
    rt = make_runtime(
        web={
            "search": {
                "kind": "brave",
                "base_url": server.url(""),
                "api_key_env": "ZUNO_TEST_BRAVE",
            }
        }
    )
    result = await search(rt, "rust", max_results=2)
    assert result.outcome is Outcome.OK, result.output
    assert "1. Brave rust 0\n   https://b0.example/\n   d0" in result.output
    assert "2. Brave rust 1" in result.output and "3. " not in result.output
    (headers,) = server.headers_for("/res/v1/web/search")[-1:]
    assert headers["X-Subscription-Token"] == "brave-test-key"


async def test_brave_with_a_wrong_key_says_where_the_key_comes_from(
    make_runtime: RuntimeFactory, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BRAVE_API_KEY", "wrong")
    rt = make_runtime(web={"search": {"kind": "brave", "base_url": server.url("")}})
    result = await search(rt, "rust")
    assert result.outcome is Outcome.ERROR and result.attempt == 1
    assert "HTTP 401" in result.output and "check the API key in BRAVE_API_KEY" in result.output


async def test_brave_without_its_key_is_a_clear_error(
    make_runtime: RuntimeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    rt = make_runtime(web={"search": {"kind": "brave"}})
    result = await search(rt, "rust")
    assert result.outcome is Outcome.ERROR
    assert "needs an API key in the environment variable BRAVE_API_KEY" in result.output


async def test_tavily_posts_the_query(
    make_runtime: RuntimeFactory, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", "tavily-test-key")
    rt = make_runtime(web={"search": {"kind": "tavily", "base_url": server.url("/tavily")}})
    result = await search(rt, "python", "go", max_results=1)
    assert result.outcome is Outcome.OK, result.output
    assert '## 1. "python"\n1. T python 0' in result.output
    assert '## 2. "go"\n1. T go 0' in result.output


@pytest.mark.parametrize(
    "args",
    [
        {"queries": []},
        {"queries": ["a"] * 6},
        {"queries": ["   "]},
        {"queries": ["a"], "max_results": 0},
        {"queries": ["a"], "max_results": 11},
        {"queries": "a"},
        {"query": "a"},
    ],
)
async def test_bad_arguments_are_blocked(
    make_runtime: RuntimeFactory, server: LocalServer, args: dict[str, object]
) -> None:
    rt = searxng(make_runtime, server)
    before = server.hits["/search"]
    result = await rt.call(rt.open_session(), "web_search", args)
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert server.hits["/search"] == before
