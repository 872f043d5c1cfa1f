"""The ``web`` section of ``zuno.json``: limits of ``webfetch`` and the search backend.

Example::

    {
      "web": {
        "timeout": 30,
        "max_download_bytes": 5242880,
        "max_redirects": 5,
        "allow_private_networks": false,
        "allowed_domains": [],
        "blocked_domains": ["example.org"],
        "search": {"kind": "searxng", "base_url": "http://127.0.0.1:8888"}
      }
    }

``search.kind`` is one of ``searxng`` (``base_url`` required, no key),
``brave`` (key read from the environment variable named by ``api_key_env``,
``BRAVE_API_KEY`` by default) or ``tavily`` (``TAVILY_API_KEY`` by default).
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "DEFAULT_BASE_URL",
    "MAX_DOWNLOAD_CEILING",
    "SearchSettings",
    "WebSettings",
    "domain_matches",
]

MAX_DOWNLOAD_CEILING = 64 * 1024 * 1024
"""The largest download limit a configuration (or a call) may ask for."""

SearchKind = Literal["searxng", "brave", "tavily"]

DEFAULT_BASE_URL: dict[str, str] = {
    "brave": "https://api.search.brave.com",
    "tavily": "https://api.tavily.com",
}
"""Where a backend answers when ``base_url`` is not set (SearXNG has no default)."""

DEFAULT_API_KEY_ENV: dict[str, str] = {
    "brave": "BRAVE_API_KEY",
    "tavily": "TAVILY_API_KEY",
}
"""The environment variable holding a backend's key when ``api_key_env`` is not set."""


class _Section(BaseModel):
    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class SearchSettings(_Section):
    """The backend ``web_search`` queries."""

    kind: SearchKind = Field(description="searxng, brave or tavily.")
    base_url: str | None = Field(
        default=None,
        description=(
            "Where the backend answers: required for searxng (http://host:port); "
            "defaults to the public API for brave and tavily."
        ),
    )
    api_key_env: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "The environment variable holding the API key (brave: BRAVE_API_KEY, "
            "tavily: TAVILY_API_KEY by default). For searxng it is optional and sent "
            "as a bearer token."
        ),
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")) or len(value) <= len("https://"):
            raise ValueError("must be an http:// or https:// URL, such as http://127.0.0.1:8888")
        return value

    @model_validator(mode="after")
    def _searxng_needs_url(self) -> Self:
        if self.kind == "searxng" and self.base_url is None:
            raise ValueError("web.search.base_url is required for kind 'searxng'")
        return self

    @property
    def url(self) -> str:
        """The base URL in use (the configured one, or the backend's public API)."""
        return self.base_url or DEFAULT_BASE_URL[self.kind]

    @property
    def key_env(self) -> str | None:
        """The environment variable holding the key, or None when no key is used."""
        return self.api_key_env or DEFAULT_API_KEY_ENV.get(self.kind)


class WebSettings(_Section):
    """How ``webfetch`` reaches the web, and which backend ``web_search`` uses."""

    timeout: float = Field(
        default=30.0, gt=0, le=600, description="Seconds one fetch or search may take in all."
    )
    max_download_bytes: int = Field(
        default=5 * 1024 * 1024,
        ge=1024,
        le=MAX_DOWNLOAD_CEILING,
        description="The most bytes of one response body webfetch downloads.",
    )
    max_redirects: int = Field(
        default=5, ge=0, le=20, description="Redirects webfetch follows before giving up."
    )
    allow_private_networks: bool = Field(
        default=False,
        description=(
            "Let webfetch reach loopback, private, link-local and other non-public "
            "addresses (refused by default)."
        ),
    )
    allowed_domains: list[str] = Field(
        default_factory=lambda: [],
        description="When not empty, webfetch reaches only these domains and their subdomains.",
    )
    blocked_domains: list[str] = Field(
        default_factory=lambda: [],
        description="Domains (and their subdomains) webfetch never reaches.",
    )
    search: SearchSettings | None = Field(
        default=None, description="The web_search backend; web_search is unusable without it."
    )

    @field_validator("allowed_domains", "blocked_domains")
    @classmethod
    def _normalize_domains(cls, values: list[str]) -> list[str]:
        out: list[str] = []
        for raw in values:
            domain = raw.strip().lower().removeprefix("*.").strip(".")
            if not domain or "/" in domain or ":" in domain or " " in domain:
                raise ValueError(
                    f"{raw!r} is not a domain; write a bare host name such as 'example.com'"
                )
            out.append(domain)
        return out


def domain_matches(host: str, domains: list[str]) -> bool:
    """Whether ``host`` is one of ``domains`` or a subdomain of one."""
    host = host.lower().rstrip(".")
    return any(host == d or host.endswith("." + d) for d in domains)
