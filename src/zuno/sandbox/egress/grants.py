"""The rules of one call in ``proxy`` mode: the configuration's, plus its grants.

A grant is an extra ``network_allow`` entry given by an approval. It is
scoped: ``ctx.extra["network_grants"]`` holds the grants of this call only
(the approval said "for this call"), and the session's grants live on the
session's services (``network_grants`` there), read at every call. A grant
saved as a rule is simply an entry added to ``sandbox.network_allow``. Deny
entries win over grants as over the allow list.
"""

from __future__ import annotations

from typing import Any

from zuno.sandbox.egress.rules import EgressRules, RuleError
from zuno.sandbox.settings import SandboxSettings
from zuno.tool import ToolContext, ToolError

__all__ = ["call_grants", "egress_rules"]


def call_grants(ctx: ToolContext) -> tuple[str, ...]:
    """The grants that apply to this call: its own, then the session's."""
    own: Any = ctx.extra.get("network_grants", ())
    session: Any = getattr(ctx.services, "network_grants", ())
    return tuple(str(g) for g in (*own, *session))


def egress_rules(settings: SandboxSettings, ctx: ToolContext) -> EgressRules:
    """The rules of this call.

    Raises:
        ToolError: A grant cannot be read (the configuration's entries were
            checked when it loaded).
    """
    try:
        return EgressRules.from_entries(
            settings.network_allow, settings.network_deny, call_grants(ctx)
        )
    except RuleError as exc:
        raise ToolError(f"a network grant cannot be used: {exc}") from exc
