"""The rules of one call in ``proxy`` mode: the configuration's, plus its grants.

A grant is an extra ``network_allow`` entry for one call only, held in
``ctx.extra["network_grants"]``: ``shell`` puts its ``network_hosts`` there,
which the pre-flight always put to a person first (see
:meth:`zuno.tool.Tool.network_request`). A lasting grant is an entry added to
``sandbox.network_allow``. Deny entries win over grants as over the allow list.
"""

from __future__ import annotations

from typing import Any

from zuno.sandbox.egress.rules import EgressRules, RuleError
from zuno.sandbox.settings import SandboxSettings
from zuno.tool import ToolContext, ToolError

__all__ = ["call_grants", "egress_rules"]


def call_grants(ctx: ToolContext) -> tuple[str, ...]:
    """The grants of this call (none unless an approved ``network_hosts`` set them)."""
    own: Any = ctx.extra.get("network_grants", ())
    return tuple(str(g) for g in own)


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
