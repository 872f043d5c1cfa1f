"""What a workspace ``zuno.json`` the user has not trusted may change: only narrowing.

A cloned repository's ``zuno.json`` is read like any other file in it: as
someone else's words. Until the user trusts the folder (:mod:`zuno.config.trust`),
it may make Zuno stricter and nothing else:

- ``permission``: ``mode`` only towards ``strict`` and ``plan``; ``rules`` only adds
  ``deny`` and ``ask`` rules, after the user's, which are all kept.
- ``tools``: only switches tools off (``false``).
- limits (``concurrency``, ``tool_output``, timeouts, ``replay.attempts``,
  ``web`` sizes): only lower than the user's value.
- ``sandbox``: ``mode`` only towards ``read-only``, ``network`` only towards
  off (``true``, then ``"proxy"``, then ``false``), ``network_allow`` only
  loses entries, ``network_deny`` and ``env_remove`` only gain entries.
- ``web``: ``allow_private_networks`` only off, ``blocked_domains`` only gains
  domains.
- ``memory.enabled`` only off; ``replay.require_inspection`` only on.
- ``model`` and the replay delays are choices, not authority: honoured.

Everything else is ignored: ``hooks``, ``mcp.servers``, ``providers``,
``lsp.servers``, ``agents`` (an agent bundles a tool list, a permission mode,
a model and a prompt; half an agent is not what the repository meant, and a
whole one widens), ``council``, ``sandbox.kind`` and ``writable_roots``,
``web.allowed_domains`` and ``web.search``. The tables below fail closed: a
key they do not name (a section added to the configuration later) is ignored
when untrusted, so a new setting widens nothing until someone decides here.

The functions work on JSON values: the user's configuration as validated and
dumped (so every default is present), and the workspace file as written
(which keys it sets) next to its validated dump (the normalised values).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final, cast

__all__ = ["UNTRUSTED_POLICY", "narrow"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""A key the user's configuration does not have (a tool never switched)."""

Honoured = str | None
"""None: the workspace value was used (or changed nothing); a string: ignored,
with an optional detail appended to the key's name (``" (allow rules)"``)."""

Policy = Callable[[Any, Any], tuple[Any, Honoured]]
"""``(user value, workspace value) -> (resulting value, ignored?)``."""

Table = dict[str, "Policy | Table"]


def _merged(user: Any, workspace: Any) -> Any:
    """What a trusted file would produce for this key (objects merge key by key)."""
    if isinstance(user, dict) and isinstance(workspace, dict):
        out = cast(dict[str, Any], dict(user))  # type: ignore[arg-type]
        for key, value in cast(dict[str, Any], workspace).items():
            out[key] = _merged(out.get(key, MISSING), value)
        return out
    return workspace


def _ignore(user: Any, workspace: Any) -> tuple[Any, Honoured]:
    """Keep the user's value; name the key only when the file would have changed it."""
    return user, (None if _merged(user, workspace) == user else "")


def _any(user: Any, workspace: Any) -> tuple[Any, Honoured]:
    """A preference with no authority in it: the workspace's value is used."""
    return workspace, None


def _lower(user: Any, workspace: Any) -> tuple[Any, Honoured]:
    """A limit: only a lower value is used (None means no limit, the widest)."""
    if workspace == user:
        return workspace, None
    if workspace is not None and (user is None or workspace < user):
        return workspace, None
    return user, ""


def _off_only(user: Any, workspace: Any) -> tuple[Any, Honoured]:
    """A switch whose ``true`` widens: only ``false`` is used."""
    if workspace is False or workspace == user:
        return workspace, None
    return user, ""


def _network(user: Any, workspace: Any) -> tuple[Any, Honoured]:
    """``sandbox.network``: only towards closed (``true``, then ``"proxy"``, then ``false``)."""
    order: list[Any] = [True, "proxy", False]

    def rank(value: Any) -> int | None:
        return next((i for i, v in enumerate(order) if v is value or v == value), None)

    ours, theirs = rank(user), rank(workspace)
    if workspace == user or (ours is not None and theirs is not None and theirs >= ours):
        return workspace, None
    return user, ""


def _subset(user: Any, workspace: Any) -> tuple[Any, Honoured]:
    """A list of permissions: the workspace may drop entries, never add one."""
    kept: list[Any] = list(user) if isinstance(user, list) else []  # type: ignore[arg-type]
    chosen = [x for x in workspace if x in kept]
    return chosen, (None if len(chosen) == len(workspace) else " (entries not in yours)")


def _on_only(user: Any, workspace: Any) -> tuple[Any, Honoured]:
    """A switch whose ``false`` widens (a safety check): only ``true`` is used."""
    if workspace is True or workspace == user:
        return workspace, None
    return user, ""


def _towards(*order: str) -> Policy:
    """A choice ranked from widest to narrowest: only a move towards the end is used."""

    def policy(user: Any, workspace: Any) -> tuple[Any, Honoured]:
        if user in order and workspace in order and order.index(workspace) >= order.index(user):
            return workspace, None
        return user, (None if workspace == user else "")

    return policy


def _adds(user: Any, workspace: Any) -> tuple[Any, Honoured]:
    """A list of restrictions: the workspace's entries join the user's, none leave."""
    kept: list[Any] = list(user) if isinstance(user, list) else []  # type: ignore[arg-type]
    return kept + [x for x in workspace if x not in kept], None


def _stricter_rules(user: Any, workspace: Any) -> tuple[Any, Honoured]:
    """Rules: the user's all stay; the workspace adds deny and ask rules, never allow."""
    kept: list[Any] = list(user)
    added = [r for r in workspace if r not in kept and r.get("action") in ("deny", "ask")]
    widening = any(r not in kept and r.get("action") not in ("deny", "ask") for r in workspace)
    return kept + added, (" (allow rules)" if widening else None)


_LIMITS: Final = _lower

UNTRUSTED_POLICY: Final[Table] = {
    "tools": {"*": _off_only},
    "concurrency": {
        "tool_calls": _LIMITS,
        "delegations": _LIMITS,
        "mcp_connections": _LIMITS,
        "lsp_requests": _LIMITS,
    },
    "tool_output": {
        "max_bytes": _LIMITS,
        "max_lines": _LIMITS,
        "artifact_max_bytes": _LIMITS,
        "session_artifacts_max_bytes": _LIMITS,
        "image_max_bytes": _LIMITS,
    },
    "permission": {
        "mode": _towards("permissive", "accept-edits", "strict", "plan"),
        "rules": _stricter_rules,
    },
    "replay": {
        "attempts": _LIMITS,
        "base_delay": _any,
        "max_delay": _any,
        "require_inspection": _on_only,
    },
    "model": _any,
    "memory": {"enabled": _off_only},
    "sandbox": {
        "mode": _towards("full-access", "workspace-write", "read-only"),
        "network": _network,
        "network_allow": _subset,
        "network_deny": _adds,
        "timeout_default": _LIMITS,
        "timeout_max": _LIMITS,
        "env_remove": _adds,
    },
    "web": {
        "timeout": _LIMITS,
        "max_download_bytes": _LIMITS,
        "max_redirects": _LIMITS,
        "allow_private_networks": _off_only,
        "blocked_domains": _adds,
    },
    "mcp": {},
    "lsp": {"request_timeout": _LIMITS, "startup_timeout": _LIMITS},
    # Named so the choice is visible; any key not in this table is ignored the same way.
    "agents": _ignore,
    "hooks": _ignore,
    "council": _ignore,
    "providers": _ignore,
    # Prices decide what a --max-budget lets through: a repository must not lower them.
    "models": _ignore,
}
"""How each key of an untrusted workspace file is treated; a key not named is ignored.

A nested table applies to the keys inside that section; ``"*"`` stands for
any key of a map (the tool names of ``tools``)."""


def narrow(
    user: dict[str, Any], raw: dict[str, Any], workspace: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """Apply an untrusted workspace file over the user's configuration.

    Args:
        user: The user's configuration, validated and dumped as JSON (every
            default present).
        raw: The workspace file as written: which keys it sets.
        workspace: The workspace file validated alone and dumped as JSON: the
            normalised values of those keys.

    Returns:
        The resulting configuration data, never wider than ``user`` on any
        setting, and the dotted names of the keys that were ignored because
        they would have widened it (in the file's order).
    """
    ignored: list[str] = []
    merged = _walk(UNTRUSTED_POLICY, user, raw, workspace, "", ignored)
    sandbox = merged.get("sandbox")
    if isinstance(sandbox, dict):
        # Both timeouts only fall; a lowered maximum pulls the user's default down with it.
        box: dict[str, Any] = sandbox  # type: ignore[assignment]
        if box.get("timeout_default", 0) > box.get("timeout_max", float("inf")):
            box["timeout_default"] = box["timeout_max"]
    return merged, ignored


def _walk(
    table: Table,
    user: dict[str, Any],
    raw: dict[str, Any],
    workspace: dict[str, Any],
    path: str,
    ignored: list[str],
) -> dict[str, Any]:
    out = dict(user)
    for key, raw_value in raw.items():
        # A map's keys come from the file: shown quoted when they hold control characters.
        shown = key if key.isprintable() else json.dumps(key)
        name = f"{path}.{shown}" if path else shown
        if name == "sources":
            continue  # not a setting: where the configuration was read from
        policy = table.get(key, table.get("*", _ignore))
        mine = user.get(key, MISSING)
        theirs = workspace.get(key, raw_value)
        if isinstance(policy, dict):
            if isinstance(raw_value, dict) and isinstance(mine, dict) and isinstance(theirs, dict):
                out[key] = _walk(policy, mine, raw_value, theirs, name, ignored)  # type: ignore[arg-type]
                continue
            policy = _ignore
        value, note = policy(mine, theirs)
        if note is not None:
            ignored.append(name + note)
        if value is MISSING:
            out.pop(key, None)
        else:
            out[key] = value
    return out
