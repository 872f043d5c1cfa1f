"""Tokens and cost per session, the price of each model, and the spending cap.

Every model reply's token counts are stored with its ``agent.reply`` event,
with the model that produced them and, when the model's price is known, the
cost in US dollars at that price. A session's totals are summed from those
events (its child agents' sessions too, when asked), so ``zuno show`` and a
resumed session see what was spent, whichever process spent it.

Prices are US dollars per million tokens. ``zuno.json`` names them per model,
by the ``PROVIDER:MODEL`` string used to run it::

    {"models": {"openai:gpt-4o": {"price": {"input": 2.5, "output": 10}}}}

A model not named there is looked up in :data:`BUILTIN_PRICES`, a short table
of common models copied from the providers' price lists (dated by
:data:`PRICES_AS_OF`; a price configured in ``zuno.json`` always wins). A
model in neither has no known cost: Zuno says so rather than guess.

A :class:`Budget` caps what a run may spend (``--max-budget USD``, and
``--max-tokens-budget N`` on tokens). It is checked before each model
request, never during one: the turn ends with ``TurnStatus.BUDGET`` once the
session's cost (its earlier turns and its child agents included) has reached
the cap. Agents running at once (parallel tasks) may each finish the request
they had already sent, so the cap can be passed by those requests' cost. It
fails closed: with a cap on dollars, a model without a known price and a
reply without token counts end the turn instead of spending uncounted money.

A cap is stored with the session (``sessions.options``): a resume that names
none keeps it, one that names a new cap replaces it (:func:`session_budget`),
and a session queued with a cap (``zuno submit``) is held to it by the worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zuno.config.models import ModelPrice, ModelSettings

if TYPE_CHECKING:
    from zuno.config.loading import Config
    from zuno.contract.usage import Usage
    from zuno.durability.store import Store

__all__ = [
    "BUILTIN_PRICES",
    "PRICES_AS_OF",
    "Budget",
    "BudgetError",
    "ModelPrice",
    "ModelSettings",
    "SessionUsage",
    "format_usd",
    "price_for",
    "session_budget",
    "session_usage",
    "step_cost",
    "usage_from_events",
]

REPLY_EVENT = "agent.reply"
"""The event each model reply is stored with, token counts and cost included."""


PRICES_AS_OF = "2025-10"
"""When :data:`BUILTIN_PRICES` were copied from the providers' price lists."""

BUILTIN_PRICES: dict[str, ModelPrice] = {
    name: ModelPrice.model_construct(input=i, output=o)  # literals: no validator built at import
    for name, (i, o) in {
        # OpenAI, standard tier.
        "openai:gpt-5": (1.25, 10.0),
        "openai:gpt-5-mini": (0.25, 2.0),
        "openai:gpt-5-nano": (0.05, 0.40),
        "openai:gpt-4.1": (2.0, 8.0),
        "openai:gpt-4.1-mini": (0.40, 1.60),
        "openai:gpt-4.1-nano": (0.10, 0.40),
        "openai:gpt-4o": (2.50, 10.0),
        "openai:gpt-4o-mini": (0.15, 0.60),
        "openai:o3": (2.0, 8.0),
        "openai:o4-mini": (1.10, 4.40),
        # Anthropic, prompts up to 200k tokens.
        "anthropic:claude-opus-4-1": (15.0, 75.0),
        "anthropic:claude-opus-4-0": (15.0, 75.0),
        "anthropic:claude-sonnet-4-5": (3.0, 15.0),
        "anthropic:claude-sonnet-4-0": (3.0, 15.0),
        "anthropic:claude-haiku-4-5": (1.0, 5.0),
        "anthropic:claude-3-5-haiku-latest": (0.80, 4.0),
    }.items()
}
"""Prices of common models as of :data:`PRICES_AS_OF` (``models`` in zuno.json wins)."""


class BudgetError(Exception):
    """A budget that cannot be kept, such as a cap on dollars for a model with no price."""


def price_for(model: str, config: Config | None) -> ModelPrice | None:
    """The price of ``model`` (``PROVIDER:MODEL``): zuno.json's, else the built-in table's."""
    if config is not None:
        settings = config.models.get(model)
        if settings is not None and settings.price is not None:
            return settings.price
    return BUILTIN_PRICES.get(model)


def step_cost(price: ModelPrice | None, usage: Usage) -> float | None:
    """The cost of one reply in USD; None when the price or the token counts are unknown."""
    if price is None or usage.input_tokens is None or usage.output_tokens is None:
        return None
    return (usage.input_tokens * price.input + usage.output_tokens * price.output) / 1_000_000


def format_usd(amount: float) -> str:
    """Dollars as a person reads them: cents above a dollar, four decimals below."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"


def no_price_message(model: str) -> str:
    """What to do when a model has no known price."""
    return (
        f"no price is known for {model}: set it in zuno.json as "
        f'"models": {{"{model}": {{"price": {{"input": USD, "output": USD}}}}}} '
        "(US dollars per million tokens)"
    )


@dataclass(frozen=True, slots=True)
class SessionUsage:
    """Tokens and cost of a session's model replies, summed from their events."""

    requests: int = 0
    """Model replies counted."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    """The cost of the replies whose cost is known."""
    unpriced: int = 0
    """Replies whose cost is unknown (no price for their model, or no token counts)."""
    unreported: int = 0
    """Replies whose provider reported no token counts."""
    unpriced_models: tuple[str, ...] = ()
    models: tuple[str, ...] = ()

    @property
    def tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens

    @property
    def cost_known(self) -> bool:
        """Whether every reply's cost is known (``cost_usd`` is then the whole cost)."""
        return self.unpriced == 0

    def __add__(self, other: SessionUsage) -> SessionUsage:
        return SessionUsage(
            self.requests + other.requests,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_usd + other.cost_usd,
            self.unpriced + other.unpriced,
            self.unreported + other.unreported,
            tuple(dict.fromkeys([*self.unpriced_models, *other.unpriced_models])),
            tuple(dict.fromkeys([*self.models, *other.models])),
        )

    def describe(self) -> str:
        """One line: tokens in and out, and the cost or why it is not known."""
        if not self.requests:
            return "no model requests"
        tokens = f"{self.input_tokens:,} tokens in, {self.output_tokens:,} out"
        if self.unreported:
            tokens += f" ({self.unreported} of {self.requests} replies reported no token counts)"
        if self.cost_known:
            return f"{tokens}; cost {format_usd(self.cost_usd)}"
        why = (
            f"no price for {', '.join(self.unpriced_models)}"
            if self.unpriced_models
            else "token counts missing"
        )
        if self.unpriced == self.requests:
            return f"{tokens}; cost unknown ({why})"
        return (
            f"{tokens}; cost at least {format_usd(self.cost_usd)} "
            f"({self.unpriced} of {self.requests} replies unknown: {why})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 6) if self.cost_known else None,
            "known_cost_usd": round(self.cost_usd, 6),
            "unpriced_requests": self.unpriced,
            "unpriced_models": list(self.unpriced_models),
            "models": list(self.models),
        }


PriceOf = Callable[[str], "ModelPrice | None"]


def usage_from_events(
    events: Iterable[tuple[str, dict[str, Any]]], price_of: PriceOf | None = None
) -> SessionUsage:
    """Sum the ``agent.reply`` events among ``(kind, data)`` pairs.

    A reply stored without a cost is priced with ``price_of`` when given (a
    price configured since), else counted as unknown.
    """
    total = SessionUsage()
    for kind, data in events:
        if kind != REPLY_EVENT:
            continue
        tokens_in, tokens_out = data.get("input_tokens"), data.get("output_tokens")
        model = str(data.get("model") or "")
        reported = isinstance(tokens_in, int) and isinstance(tokens_out, int)
        cost = data.get("cost_usd")
        if not isinstance(cost, int | float) and reported and price_of is not None and model:
            price = price_of(model)
            if price is not None:
                cost = (tokens_in * price.input + tokens_out * price.output) / 1_000_000  # type: ignore[operator]
        priced = isinstance(cost, int | float) and math.isfinite(cost)
        total = total + SessionUsage(
            requests=1,
            input_tokens=tokens_in if isinstance(tokens_in, int) else 0,
            output_tokens=tokens_out if isinstance(tokens_out, int) else 0,
            cost_usd=float(cost) if priced else 0.0,  # type: ignore[arg-type]
            unpriced=0 if priced else 1,
            unreported=0 if reported else 1,
            unpriced_models=(model,) if not priced and reported and model else (),
            models=(model,) if model else (),
        )
    return total


def session_usage(
    store: Store, session_id: str, *, children: bool = True, price_of: PriceOf | None = None
) -> SessionUsage:
    """A session's stored usage; with ``children``, its child agents' sessions added."""
    total = usage_from_events(((e.kind, e.data) for e in store.events(session_id)), price_of)
    if children:
        seen = {session_id}
        todo = [c.session_id for c in store.child_sessions(session_id)]
        while todo:
            child = todo.pop()
            if child in seen:
                continue
            seen.add(child)
            events = ((e.kind, e.data) for e in store.events(child))
            total = total + usage_from_events(events, price_of)
            todo.extend(c.session_id for c in store.child_sessions(child))
    return total


@dataclass(slots=True)
class Budget:
    """A cap on what the agents of a runtime may spend (``runtime.budget``).

    The count starts from what the session already spent (:meth:`load`, done
    by the top agent's loop) and grows with every reply of any agent on the
    runtime (:meth:`add`), child agents included.

    Args:
        max_usd: The cap in US dollars, or None.
        max_tokens: The cap on input and output tokens together, or None.
    """

    max_usd: float | None = None
    max_tokens: int | None = None
    spent_usd: float = 0.0
    tokens: int = 0
    uncounted: list[str] = field(default_factory=lambda: [])
    """Why some spending could not be counted (fails closed with a cap on dollars)."""
    unreported: int = 0
    """Replies without token counts (fails closed with a cap on tokens)."""

    def __post_init__(self) -> None:
        if self.max_usd is not None and not (math.isfinite(self.max_usd) and self.max_usd > 0):
            raise BudgetError(
                f"--max-budget must be a positive number of dollars, not {self.max_usd}"
            )
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise BudgetError(f"--max-tokens-budget must be positive, not {self.max_tokens}")

    def check_model(self, model: str, config: Config | None) -> None:
        """Refuse to start a run whose cap on dollars cannot be kept for ``model``.

        Raises:
            BudgetError: The model has no known price.
        """
        if self.max_usd is not None and price_for(model, config) is None:
            raise BudgetError(
                f"--max-budget needs the price of the model; {no_price_message(model)}, "
                "or run without --max-budget"
            )

    def load(self, store: Store, session_id: str, config: Config | None = None) -> None:
        """Start from what ``session_id`` (and its child agents) already spent."""
        usage = session_usage(store, session_id, price_of=lambda model: price_for(model, config))
        self.spent_usd = usage.cost_usd
        self.tokens = usage.tokens
        self.uncounted = []
        self.unreported = usage.unreported
        if not usage.cost_known:
            self.uncounted.append(
                f"{usage.unpriced} earlier model replies of this session have no known cost"
                + (
                    f" ({no_price_message(usage.unpriced_models[0])})"
                    if usage.unpriced_models
                    else ""
                )
            )

    def add(self, usage: Usage, cost: float | None, model: str) -> None:
        """Count one reply's tokens and cost."""
        self.tokens += (usage.input_tokens or 0) + (usage.output_tokens or 0)
        if cost is not None:
            self.spent_usd += cost
        elif usage.input_tokens is None or usage.output_tokens is None:
            self.uncounted.append(f"a reply of {model} came without token counts")
            self.unreported += 1
        else:
            self.uncounted.append(no_price_message(model))

    def stop_reason(self, model: str, price: ModelPrice | None) -> str | None:
        """Why the next request to ``model`` must not be sent, or None when it may."""
        if self.max_usd is not None:
            if price is None:
                cap = format_usd(self.max_usd)
                return f"the budget of {cap} cannot be kept: {no_price_message(model)}"
            if self.uncounted:
                return (
                    f"the budget of {format_usd(self.max_usd)} cannot be kept: {self.uncounted[0]}"
                )
            if self.spent_usd >= self.max_usd:
                return (
                    f"the budget of {format_usd(self.max_usd)} is spent "
                    f"({format_usd(self.spent_usd)} so far in this session, child agents included)"
                )
        if self.max_tokens is not None and self.unreported:
            return (
                f"the token budget of {self.max_tokens:,} cannot be kept: "
                f"{self.unreported} model replies came without token counts"
            )
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            return (
                f"the token budget of {self.max_tokens:,} is spent "
                f"({self.tokens:,} so far in this session, child agents included)"
            )
        return None


def session_budget(store: Store, session_id: str, given: Budget | None) -> Budget | None:
    """The cap for a turn of ``session_id``: the one given now, else the one stored.

    A cap given now is stored with the session, each of its two limits replacing
    the stored one; a limit not given keeps the stored value. So a resume without
    ``--max-budget`` is held to the cap the session was run (or queued) with.
    """
    from zuno.durability.session_options import session_options, update_session_options

    if given is not None:
        changes = {
            key: value
            for key, value in (
                ("max_budget", given.max_usd),
                ("max_tokens_budget", given.max_tokens),
            )
            if value is not None
        }
        if changes:
            update_session_options(store, session_id, changes)
    stored = session_options(store, session_id)
    usd, tokens = stored.get("max_budget"), stored.get("max_tokens_budget")
    max_usd = float(usd) if isinstance(usd, int | float) and not isinstance(usd, bool) else None
    max_tokens = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None
    if max_usd is None and max_tokens is None:
        return given
    if given is not None and (given.max_usd, given.max_tokens) == (max_usd, max_tokens):
        return given
    return Budget(max_usd, max_tokens)
