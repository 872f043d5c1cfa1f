"""The rules of ``proxy`` network mode, and what an untrusted workspace may do to them."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from pydantic import ValidationError

from zuno.config.egress import EgressRules, RuleError, parse_rule
from zuno.config.loading import Config, validate_config
from zuno.config.narrowing import narrow
from zuno.config.sandbox import SandboxSettings
from zuno.execution.sandbox import selection
from zuno.execution.sandbox.egress.ledger import suggested_rules
from zuno.execution.sandbox.policy import SandboxError
from zuno.execution.sandbox.probing import BackendProbe, probe_landlock_proxy
from zuno.execution.sandbox.selection import select_sandbox


def test_names_wildcards_ports_and_presets() -> None:
    rules = EgressRules.from_entries(["*.example.org", "api.test:8443", "@pypi"], [])
    assert rules.check_name("a.b.example.org", 443).allowed
    assert not rules.check_name("example.org", 443).allowed  # *. is below the name only
    assert not rules.check_name("evil-example.org", 443).allowed
    assert rules.check_name("API.test.", 8443).allowed
    assert not rules.check_name("api.test", 443).allowed
    assert rules.check_name("files.pythonhosted.org", 443).rule == "files.pythonhosted.org:443"
    refused = rules.check_name("registry.example.com", 443)
    assert refused.reason == (
        "blocked network: registry.example.com:443 is not in sandbox.network_allow; "
        "ask the user or add it"
    )


def test_deny_wins_over_allow_and_over_grants() -> None:
    rules = EgressRules.from_entries(["*.example.org"], ["bad.example.org"], ["bad.example.org"])
    decision = rules.check_name("bad.example.org", 80)
    assert not decision.allowed and decision.rule == "bad.example.org"
    assert rules.check_name("good.example.org", 80).allowed


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "192.168.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "::1",
        "fd00::1",
        "::ffff:127.0.0.1",
        "0.0.0.0",
        "224.0.0.1",
    ],
)
def test_non_public_addresses_need_an_address_entry(address: str) -> None:
    ip = ipaddress.ip_address(address)
    assert not EgressRules.from_entries(["h.test"], []).check_address("h.test", ip, 80).allowed
    network = "::/0" if ip.version == 6 else "0.0.0.0/0"
    assert EgressRules.from_entries(["h.test", network], []).check_address("h.test", ip, 80).allowed


def test_an_address_deny_refuses_a_public_address_whatever_the_name() -> None:
    rules = EgressRules.from_entries(["h.test"], ["93.184.216.0/24"])
    ip = ipaddress.ip_address("93.184.216.34")
    assert not rules.check_address("h.test", ip, 443).allowed
    assert rules.check_address("h.test", ipaddress.ip_address("8.8.8.8"), 443).allowed


@pytest.mark.parametrize("entry", ["", "*", "a..b", "*.*.x", "x:0", "x:99999", "@nope", "a b"])
def test_unreadable_entries_are_configuration_errors(entry: str) -> None:
    with pytest.raises(RuleError):
        parse_rule(entry)
    with pytest.raises(ValidationError):
        SandboxSettings(network="proxy", network_allow=(entry,))


def test_proxy_mode_without_a_sandbox_is_a_startup_error() -> None:
    with pytest.raises(SandboxError, match='"proxy", which needs a sandbox'):
        select_sandbox(SandboxSettings(kind="none", network="proxy"))


def _narrowed(user: dict[str, Any], workspace: dict[str, Any]) -> tuple[Config, list[str]]:
    data, ignored = narrow(
        validate_config(user, "user").model_dump(mode="json", exclude={"sources"}),
        workspace,
        validate_config(workspace, "workspace").model_dump(mode="json", exclude={"sources"}),
    )
    return Config.model_validate(data), ignored


def test_an_untrusted_workspace_may_only_narrow_the_network() -> None:
    user = {"sandbox": {"network": "proxy", "network_allow": ["@pypi", "a.test"]}}
    wider = {"sandbox": {"network": True, "network_allow": ["a.test", "evil.test"]}}
    config, ignored = _narrowed(user, wider)
    assert config.sandbox.network == "proxy"
    assert config.sandbox.network_allow == ("a.test",)
    assert ignored == ["sandbox.network", "sandbox.network_allow (entries not in yours)"]
    narrower = {"sandbox": {"network": False, "network_deny": ["a.test"]}}
    config, ignored = _narrowed(user, narrower)
    assert (config.sandbox.network, config.sandbox.network_deny, ignored) == (
        False,
        ("a.test",),
        [],
    )
    config, ignored = _narrowed({"sandbox": {"network": True}}, {"sandbox": {"network": "proxy"}})
    assert (config.sandbox.network, ignored) == ("proxy", [])


def test_suggested_rules_count_refused_hosts() -> None:
    rows = [
        {"host": "a.test", "port": 443, "decision": "refused"},
        {"host": "a.test", "port": 443, "decision": "refused"},
        {"host": "b.test", "port": 80, "decision": "refused"},
        {"host": "c.test", "port": 80, "decision": "allowed"},
    ]
    assert suggested_rules(rows) == [("a.test:443", 2), ("b.test:80", 1)]


def test_proxy_mode_under_landlock_works_here() -> None:
    """The helper brings up the namespace's loopback and allows TCP on the proxy's
    port only: the probe of that exact start passes on this kernel."""
    assert probe_landlock_proxy() is None
    assert select_sandbox(SandboxSettings(kind="landlock", network="proxy")).name == "landlock"


def test_proxy_mode_fails_closed_on_a_landlock_that_cannot_restrict_tcp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old = BackendProbe(
        "landlock", True, "Landlock ABI 3 (cannot restrict TCP; ABI 4 is needed)", abi=3
    )
    monkeypatch.setattr(selection, "probe_landlock", lambda: old)
    with pytest.raises(SandboxError) as refused:
        select_sandbox(SandboxSettings(kind="landlock", network="proxy"))
    message = str(refused.value)
    assert "\n" not in message
    assert "ABI 4 is needed), and sandbox.network is 'proxy'" in message
