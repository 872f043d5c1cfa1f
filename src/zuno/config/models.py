"""The settings of one model in ``zuno.json`` (``models``): its price and context window.

Plain settings, no behaviour: the configuration holds them
(:class:`zuno.config.loading.Config`), and the budget (:mod:`zuno.policy.budget`) reads
prices from them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ModelPrice", "ModelSettings"]


class ModelPrice(BaseModel):
    """What a model costs, in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)

    input: float = Field(ge=0, le=10_000, description="USD per million input (prompt) tokens.")
    output: float = Field(ge=0, le=10_000, description="USD per million output tokens.")


class ModelSettings(BaseModel):
    """Settings of one model, by its ``PROVIDER:MODEL`` name (``models`` in zuno.json)."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    price: ModelPrice | None = Field(
        default=None,
        description="USD per million tokens, {input, output}; used for cost and --max-budget.",
    )
    context_window: int | None = Field(
        default=None,
        ge=1000,
        le=100_000_000,
        description="Tokens the model reads at most; a conversation that nears it is "
        "compacted (default: Zuno's table of common models, else never).",
    )
