"""The token count of one model request: the vocabulary the agent and the budget share.

A provider fills a :class:`Usage` from what its API reports; the agent's reply
(:class:`zuno.agent.messages.ModelReply`) carries it, and the budget
(:mod:`zuno.policy.budget`) turns it into cost and checks the cap against it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Usage"]


class Usage(BaseModel):
    """Tokens spent on one request, when the provider reports them."""

    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    """Prompt tokens read from the provider's cache, as it reported them (OpenAI counts
    them inside ``input_tokens``; Anthropic's ``cache_read_input_tokens`` beside it)."""
