"""The ``web_search`` tool: up to five queries at once against the configured backend.

The backend is ``web.search`` in ``zuno.json`` (see :mod:`zuno.config.web`):

- ``searxng``: ``GET {base_url}/search?q=...&format=json`` (the instance must
  allow the json format); an optional key is sent as a bearer token;
- ``brave``: ``GET {base_url}/res/v1/web/search?q=...&count=N`` with the key in
  ``X-Subscription-Token``;
- ``tavily``: ``POST {base_url}/search`` with ``{"query", "max_results"}`` and
  the key as a bearer token.

The queries run concurrently, each with its own deadline (``web.timeout``). A
query that fails is reported in its place while the others still answer; only
when every query fails does the call fail, transiently (so the dispatcher
retries it) when every failure may pass. Without a backend the tool is not
offered at all (:meth:`WebSearchTool.unavailable_reason`: ``zuno tools`` and
``zuno doctor`` say what to set); a call that reaches it anyway is refused with
the key to set. Titles and snippets are stripped of
markup and shortened; the output is bounded by the tool output limits.

The backend is the user's own choice, so the private-network guard of
``webfetch`` does not apply to it: a SearXNG on localhost is the common case.
"""

from __future__ import annotations

import html
import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, cast

import anyio
from pydantic import AfterValidator, Field, StringConstraints

from zuno.config.web import SearchSettings
from zuno.contract.output import bound_text
from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolError, ToolResult, TransientError
from zuno.core.declarations import READ_ONLY_SAFE_PARALLEL

if TYPE_CHECKING:
    import httpx

    from zuno.config.loading import Config

__all__ = [
    "DEFAULT_RESULTS",
    "MAX_QUERIES",
    "MAX_RESULTS",
    "NOT_CONFIGURED",
    "SearchHit",
    "WebSearchArgs",
    "WebSearchTool",
]

MAX_QUERIES = 5
"""Queries one call may run."""
MAX_RESULTS = 10
"""The most results shown per query."""
DEFAULT_RESULTS = 5
"""Results per query when ``max_results`` is not given."""

_SNIPPET_CHARS = 400
_TITLE_CHARS = 200
_TAG = re.compile(r"<[^>]*>")

NOT_CONFIGURED = (
    "no search backend is configured: set web.search in zuno.json "
    '(kind searxng, brave or tavily; e.g. {"kind": "searxng", "base_url": "http://127.0.0.1:8888"})'
)
"""Why ``web_search`` is not offered, for ``zuno tools`` and ``zuno doctor``."""

NO_BACKEND = (
    "web_search has no search backend configured. Set web.search in zuno.json, for "
    'example "web": {"search": {"kind": "searxng", "base_url": "http://127.0.0.1:8888"}} '
    "(kinds: searxng, brave, tavily; brave and tavily read their API key from "
    "BRAVE_API_KEY or TAVILY_API_KEY, or the variable named by web.search.api_key_env). "
    "Until then, use webfetch on a URL you know."
)


def _stripped(value: str) -> str:
    text = " ".join(value.split())  # Python's notion of whitespace, control separators included
    if not text:
        raise ValueError("a query must contain text, not only whitespace")
    return text


Query = Annotated[str, StringConstraints(min_length=1, max_length=400), AfterValidator(_stripped)]


class WebSearchArgs(ToolArgs):
    """Arguments of ``web_search``."""

    queries: list[Query] = Field(
        min_length=1,
        max_length=MAX_QUERIES,
        description=(
            f"1 to {MAX_QUERIES} search queries (each up to 400 characters), run at once; "
            "each is searched on its own."
        ),
    )
    max_results: int = Field(
        default=DEFAULT_RESULTS,
        ge=1,
        le=MAX_RESULTS,
        description=f"Results per query, 1..{MAX_RESULTS}. Default {DEFAULT_RESULTS}.",
    )


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result."""

    title: str
    url: str
    snippet: str


@dataclass(slots=True)
class _Answer:
    query: str
    hits: list[SearchHit]
    error: ToolError | None = None


class WebSearchTool(Tool[WebSearchArgs]):
    """Run several web searches at once."""

    name = "web_search"
    description = (
        f"Search the web: 1 to {MAX_QUERIES} queries at once, run concurrently. Returns up "
        f"to max_results (default {DEFAULT_RESULTS}, at most {MAX_RESULTS}) numbered results "
        "per query, each a title, URL and snippet. A failed query is reported in its place "
        "without hiding the others. Open a result with webfetch."
    )
    args_model = WebSearchArgs
    declaration = READ_ONLY_SAFE_PARALLEL

    def unavailable_reason(self, config: Config) -> str | None:
        """Why the tool cannot be offered: no backend in ``web.search`` (None when there is one)."""
        return NOT_CONFIGURED if config.web.search is None else None

    async def run(self, args: WebSearchArgs, ctx: ToolContext) -> ToolResult:
        # Imported on use: every surface loads this tool to ask whether it is set up.
        from zuno.integrations.web import USER_AGENT
        from zuno.tools.web import room_for_marker

        """Run every query against the backend and list the results."""
        import httpx  # imported on use: slow to import

        web = ctx.config.web
        backend = web.search
        if backend is None:
            raise ToolError(NO_BACKEND)
        key = _api_key(backend)
        answers = [_Answer(q, []) for q in args.queries]

        async def search(answer: _Answer, client: httpx.AsyncClient) -> None:
            try:
                with anyio.fail_after(web.timeout):
                    answer.hits = await _query(client, backend, key, answer.query, args)
            except TimeoutError:
                answer.error = TransientError(
                    f"no answer from the {backend.kind} backend within {web.timeout:g} s"
                )
            except ToolError as exc:
                answer.error = exc

        async with (
            httpx.AsyncClient(headers={"User-Agent": USER_AGENT}, timeout=web.timeout) as client,
            anyio.create_task_group() as tg,
        ):
            for answer in answers:
                tg.start_soon(search, answer, client)
        failed = [a for a in answers if a.error is not None]
        if len(failed) == len(answers):
            detail = "; ".join(f"{a.query!r}: {a.error}" for a in failed)
            transient = all(isinstance(a.error, TransientError) for a in failed)
            error = TransientError if transient else ToolError
            raise error(f"every query failed ({backend.kind} at {backend.url}): {detail}")
        text = _render(answers, backend.kind)
        bounded = bound_text(
            text, room_for_marker(ctx.limits), lambda: ctx.artifact_path("web_search")
        )
        return ToolResult(
            output=bounded.text,
            data={
                "backend": backend.kind,
                "queries": [
                    {
                        "query": a.query,
                        "results": [
                            {"title": h.title, "url": h.url, "snippet": h.snippet} for h in a.hits
                        ],
                        "error": str(a.error) if a.error is not None else None,
                    }
                    for a in answers
                ],
            },
            artifact=bounded.artifact,
        )


def _api_key(backend: SearchSettings) -> str | None:
    env = backend.key_env
    if env is None:
        return None
    key = os.environ.get(env, "").strip()
    if key:
        return key
    if backend.kind == "searxng":
        return None  # a key is optional for SearXNG
    raise ToolError(
        f"web_search uses {backend.kind}, which needs an API key in the environment "
        f"variable {env} (named by web.search.api_key_env in zuno.json), and it is not set"
    )


async def _query(
    client: httpx.AsyncClient,
    backend: SearchSettings,
    key: str | None,
    query: str,
    args: WebSearchArgs,
) -> list[SearchHit]:
    import httpx  # imported on use: slow to import

    from zuno.integrations.web import http_failure

    base = backend.url
    bearer = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        if backend.kind == "searxng":
            response = await client.get(
                f"{base}/search", params={"q": query, "format": "json"}, headers=bearer
            )
        elif backend.kind == "brave":
            response = await client.get(
                f"{base}/res/v1/web/search",
                params={"q": query, "count": args.max_results},
                headers={"X-Subscription-Token": key or "", "Accept": "application/json"},
            )
        else:
            response = await client.post(
                f"{base}/search",
                json={"query": query, "max_results": args.max_results},
                headers=bearer,
            )
    except httpx.HTTPError as exc:
        raise http_failure(exc, f"{backend.kind} search") from None
    if response.status_code >= 400:
        raise _backend_status(response, backend)
    try:
        data: Any = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ToolError(
            f"the {backend.kind} backend at {base} did not answer with JSON"
            + (
                " (is the json format enabled in SearXNG's settings.yml?)"
                if _searxng(backend)
                else ""
            )
        ) from None
    return _hits(data, backend.kind)[: args.max_results]


def _searxng(backend: SearchSettings) -> bool:
    return backend.kind == "searxng"


def _backend_status(response: httpx.Response, backend: SearchSettings) -> ToolError:
    from zuno.integrations.web import status_failure

    excerpt = " ".join(response.text[:300].split())
    if response.status_code in (401, 403):
        if backend.kind == "searxng":
            excerpt += " (SearXNG answers 403 when its json format is not enabled in settings.yml)"
        elif backend.key_env:
            excerpt += f" (check the API key in {backend.key_env})"
    return status_failure(
        response.status_code,
        response.reason_phrase,
        f"the {backend.kind} backend",
        excerpt.strip(),
        response.headers.get("retry-after"),
    )


def _hits(data: object, kind: str) -> list[SearchHit]:
    """The results of one backend answer, cleaned and without repeated URLs."""
    if not isinstance(data, dict):
        raise ToolError(f"the {kind} backend answered with unexpected JSON (not an object)")
    data = cast(object, data)
    if kind == "brave":
        rows = _field(_field(data, "web"), "results")
        snippet_key = "description"
    else:
        rows = _field(data, "results")
        snippet_key = "content"
    if rows is None:
        return []
    if not isinstance(rows, list):
        raise ToolError(f"the {kind} backend answered with unexpected JSON (results not a list)")
    hits: list[SearchHit] = []
    seen: set[str] = set()
    for row in cast(list[object], rows):
        url = _clean(_field(row, "url"), 2000)
        if not url.startswith(("http://", "https://")) or url in seen:
            continue
        seen.add(url)
        title = _clean(_field(row, "title"), _TITLE_CHARS) or url
        hits.append(SearchHit(title, url, _clean(_field(row, snippet_key), _SNIPPET_CHARS)))
    return hits


def _field(value: object, key: str) -> object:
    """``value[key]`` when value is a JSON object holding it, else None."""
    if isinstance(value, dict):
        return cast(dict[str, object], value).get(key)
    return None


def _clean(value: object, limit: int) -> str:
    """Text without markup, entities decoded, on one line, at most ``limit`` characters."""
    if not isinstance(value, str):
        return ""
    text = " ".join(html.unescape(_TAG.sub("", value)).split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _render(answers: list[_Answer], kind: str) -> str:
    parts = [f"Web search ({kind}), {len(answers)} quer{'y' if len(answers) == 1 else 'ies'}."]
    for n, answer in enumerate(answers, 1):
        lines = [f"## {n}. {json.dumps(answer.query, ensure_ascii=False)}"]
        if answer.error is not None:
            lines.append(f"Failed: {answer.error}")
        elif not answer.hits:
            lines.append("No results.")
        for i, hit in enumerate(answer.hits, 1):
            lines.append(f"{i}. {hit.title}")
            lines.append(f"   {hit.url}")
            if hit.snippet:
                lines.append(f"   {hit.snippet}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)
