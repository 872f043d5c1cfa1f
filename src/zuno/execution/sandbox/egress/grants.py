"""The rules of one call in ``proxy`` mode: the configuration's, plus its grants.

A grant is an extra ``network_allow`` entry given by a person's approval of a
call that named hosts (``shell``'s ``network_hosts``, always put to a person:
see :meth:`zuno.contract.tool.Tool.network_request`), in one of three scopes:

- this call only: a yes. ``shell`` puts its ``network_hosts`` in
  ``ctx.extra["network_grants"]``, read here and nowhere else;
- the session: "always". The pre-flight stores a :data:`NETWORK_GRANTED`
  event, and every later command of the session (``shell``, its background
  jobs, ``exec_command``) gets the hosts;
- for good: "always", saved. The terminal approver adds the hosts to the
  user's ``sandbox.network_allow`` (:func:`zuno.policy.learned_rules.save_network_hosts`)
  and grants them to the session as above.

Deny entries win over grants as over the allow list.
"""

from __future__ import annotations

from typing import Any

from zuno.config.egress import EgressRules, RuleError
from zuno.config.sandbox import SandboxSettings
from zuno.contract.tool import ToolContext, ToolError

__all__ = ["NETWORK_GRANTED", "call_grants", "egress_rules", "session_grants"]

NETWORK_GRANTED = "network.granted"
"""The event of a session grant: ``{"hosts": [...], "scope": "session"}``."""


def session_grants(ctx: ToolContext) -> tuple[str, ...]:
    """The hosts granted to the session of ctx (none outside a runtime)."""
    store: Any = getattr(ctx.services, "store", None)
    if store is None:
        return ()
    hosts: list[str] = []
    for event in store.events(ctx.session_id):
        if event.kind == NETWORK_GRANTED and isinstance(event.data.get("hosts"), list):
            hosts.extend(str(h) for h in event.data["hosts"])
    return tuple(dict.fromkeys(hosts))


def call_grants(ctx: ToolContext) -> tuple[str, ...]:
    """The grants of this call: its own (an approved ``network_hosts``), then its session's."""
    own: Any = ctx.extra.get("network_grants", ())
    return tuple(dict.fromkeys([*(str(g) for g in own), *session_grants(ctx)]))


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
