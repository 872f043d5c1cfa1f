"""Which hosts a command in ``proxy`` network mode may reach.

An entry of ``sandbox.network_allow`` or ``sandbox.network_deny`` is one of:

- a host name, ``registry.npmjs.org``, matching that name only;
- ``*.example.org``, matching every name below ``example.org`` (not the name itself);
- an address or a network, ``127.0.0.1``, ``10.0.0.0/8``, ``[::1]``, matching the
  address a name resolved to (see below);
- ``@pypi``, ``@npm``, ``@crates``, ``@github``, ``@debian``: a preset, the hosts
  of that registry (:data:`PRESETS`).

Any entry may end in ``:PORT`` (``example.org:443``); without one it matches
every port. Deny wins over allow.

The check is made twice. First on the name the command asked for: denied, or
not allowed, is refused there. Then on each address the name resolves to: an
address that is loopback, private, link-local (cloud metadata included),
shared, reserved or multicast is refused unless an address entry of
``network_allow`` covers it, and an address entry of ``network_deny`` refuses
it whatever the name. The proxy connects to the address it checked, never
resolves the name a second time.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "PRESETS",
    "Decision",
    "EgressRules",
    "HostRule",
    "RuleError",
    "parse_rule",
    "parse_rules",
]

PRESETS: dict[str, tuple[str, ...]] = {
    "pypi": ("pypi.org:443", "files.pythonhosted.org:443"),
    "npm": ("registry.npmjs.org:443", "registry.yarnpkg.com:443"),
    "crates": ("crates.io:443", "index.crates.io:443", "static.crates.io:443"),
    "github": (
        "github.com:443",
        "github.com:22",
        "api.github.com:443",
        "codeload.github.com:443",
        "objects.githubusercontent.com:443",
        "raw.githubusercontent.com:443",
    ),
    "debian": ("deb.debian.org", "security.debian.org", "ftp.debian.org"),
}
"""The presets of ``@NAME`` entries and the entries each stands for."""

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class RuleError(ValueError):
    """An entry of ``network_allow`` or ``network_deny`` that cannot be read."""


@dataclass(frozen=True, slots=True)
class HostRule:
    """One entry: a name, a ``*.`` suffix or a network, and an optional port.

    Attributes:
        text: The entry as written (for the ledger: which rule decided).
        name: The lower-case host name, or the suffix after ``*.``; empty for a network.
        wildcard: Whether ``name`` is a suffix (``*.example.org``).
        network: The network of an address entry, else None.
        port: The one port matched, or None for every port.
    """

    text: str
    name: str = ""
    wildcard: bool = False
    network: Network | None = None
    port: int | None = None

    def matches_name(self, host: str, port: int) -> bool:
        """Whether host (lower case, no trailing dot) on port is this entry's."""
        if self.network is not None or (self.port is not None and self.port != port):
            return False
        if self.wildcard:
            return host.endswith("." + self.name)
        return host == self.name

    def matches_address(self, address: Address, port: int) -> bool:
        """Whether address on port is inside this entry's network."""
        if self.network is None or (self.port is not None and self.port != port):
            return False
        return address.version == self.network.version and address in self.network


def _split_port(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise RuleError(f"{text!r}: an IPv6 address opened with [ must close with ]")
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise RuleError(f"{text!r}: only :PORT may follow ]")
        return host, _port(text, rest[1:])
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, _port(text, port)
    return text, None


def _port(text: str, raw: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise RuleError(f"{text!r}: the port must be a number from 1 to 65535")
    return int(raw)


def parse_rule(text: str) -> list[HostRule]:
    """The rules an entry stands for (several for a preset).

    Raises:
        RuleError: The entry is not a host, ``*.suffix``, address, network or preset.
    """
    raw = text.strip()
    if raw.startswith("@"):
        preset = PRESETS.get(raw[1:].lower())
        if preset is None:
            raise RuleError(
                f"{text!r}: no such preset; the presets are " + ", ".join(f"@{p}" for p in PRESETS)
            )
        return [r for entry in preset for r in parse_rule(entry)]
    host, port = _split_port(raw)
    try:
        network = ipaddress.ip_network(host, strict=False)
    except ValueError:
        network = None
    if network is not None:
        return [HostRule(text=raw, network=network, port=port)]
    host = host.lower().rstrip(".")
    wildcard = host.startswith("*.")
    name = host[2:] if wildcard else host
    labels = name.split(".")
    if not name or "*" in name or not all(labels) or any(not _label_ok(x) for x in labels):
        raise RuleError(
            f"{text!r}: write a host name (example.org), *.example.org, an address or "
            "network (10.0.0.0/8), or a preset (@pypi), optionally followed by :PORT"
        )
    return [HostRule(text=raw, name=name, wildcard=wildcard, port=port)]


def _label_ok(label: str) -> bool:
    return len(label) <= 63 and all(c.isalnum() or c in "-_" for c in label)


def parse_rules(entries: Iterable[str]) -> tuple[HostRule, ...]:
    """Every rule of entries, in order.

    Raises:
        RuleError: One entry cannot be read.
    """
    return tuple(r for e in entries for r in parse_rule(e))


def is_public(address: Address) -> bool:
    """Whether address is on the public internet (not loopback, private, metadata ...)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return is_public(address.ipv4_mapped)
    return address.is_global and not address.is_multicast


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one check.

    Attributes:
        allowed: Whether the connection may go ahead.
        rule: The entry that decided (``network_allow``'s, ``network_deny``'s, a
            grant's), or None when none matched.
        reason: For a refusal, a sentence for the model and the user.
    """

    allowed: bool
    rule: str | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class EgressRules:
    """The allow and deny lists of one call, with the grants given to it.

    Attributes:
        allow: ``sandbox.network_allow``.
        deny: ``sandbox.network_deny``.
        grants: Extra allow entries for this call only (an approval's, a session's).
    """

    allow: tuple[HostRule, ...] = ()
    deny: tuple[HostRule, ...] = ()
    grants: tuple[HostRule, ...] = field(default=())

    @classmethod
    def from_entries(
        cls, allow: Sequence[str], deny: Sequence[str], grants: Sequence[str] = ()
    ) -> EgressRules:
        """Rules from configuration entries.

        Raises:
            RuleError: An entry cannot be read.
        """
        return cls(parse_rules(allow), parse_rules(deny), parse_rules(grants))

    def check_name(self, host: str, port: int) -> Decision:
        """The check of the name (or address literal) a command asked for."""
        host = host.lower().rstrip(".")
        try:
            literal: Address | None = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        where = f"{host}:{port}"
        for rule in self.deny:
            if rule.matches_name(host, port) or (literal and rule.matches_address(literal, port)):
                return Decision(
                    False,
                    rule.text,
                    f"blocked network: {where} is denied by sandbox.network_deny ({rule.text})",
                )
        for source, rules in (("grant", self.grants), ("allow", self.allow)):
            for rule in rules:
                if rule.matches_name(host, port) or (
                    literal and rule.matches_address(literal, port)
                ):
                    return Decision(True, rule.text if source == "allow" else f"grant {rule.text}")
        return Decision(
            False,
            None,
            f"blocked network: {where} is not in sandbox.network_allow; ask the user or add it",
        )

    def check_address(self, host: str, address: Address, port: int) -> Decision:
        """The check of one address host resolved to, made before connecting to it."""
        for rule in self.deny:
            if rule.matches_address(address, port):
                return Decision(
                    False,
                    rule.text,
                    f"blocked network: {host} resolves to {address}, denied by "
                    f"sandbox.network_deny ({rule.text})",
                )
        if is_public(address):
            return Decision(True)
        for rule in (*self.grants, *self.allow):
            if rule.matches_address(address, port):
                return Decision(True, rule.text)
        return Decision(
            False,
            None,
            f"blocked network: {host} resolves to {address}, a loopback, private or "
            "link-local address; allow that address in sandbox.network_allow if it is meant",
        )
