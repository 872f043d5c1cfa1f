"""The ``providers`` section of ``zuno.json``: the model APIs a run may name.

::

    {"providers": {"local": {"kind": "openai", "base_url": "http://127.0.0.1:11434/v1"},
                   "work":  {"kind": "anthropic", "api_key_env": "WORK_ANTHROPIC_KEY"}}}

Plain settings, no behaviour: the configuration holds them
(:class:`zuno.config.loading.Config`), and :func:`zuno.agent.providers.make_provider`
turns one into a provider when ``--model`` names it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ProviderSettings"]


class ProviderSettings(BaseModel):
    """One named provider in ``zuno.json``'s ``providers`` map."""

    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: Literal["openai", "anthropic"]
    """Which API it speaks: OpenAI-compatible Chat Completions, or Anthropic Messages."""
    base_url: str | None = None
    """The API address (``http://127.0.0.1:11434/v1``); the official one when omitted."""
    api_key_env: str | None = Field(default=None, min_length=1)
    """The environment variable holding the key; no key is sent when omitted."""
    strict_tools: bool = True
    """Use OpenAI strict mode for tools whose schema allows it (openai kind only)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """The output token limit per reply (required by Anthropic: 8192 when omitted)."""
    attempts: int = Field(default=3, ge=1, le=10)
    """Attempts per request on transport failures, 429 and 5xx (1 disables retrying)."""
    timeout: float = Field(default=600.0, gt=0, le=3600)
    """Seconds to wait for a reply before counting the attempt as failed."""
    images: bool = True
    """Whether its models accept images; false sends a sentence in place of each image."""
