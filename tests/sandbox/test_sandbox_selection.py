"""Probing, selection without silent fallback, the doctor report, settings and environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from zuno.config.sandbox import SandboxSettings
from zuno.execution.sandbox.bubblewrap import BubblewrapSandbox
from zuno.execution.sandbox.environment import command_environment
from zuno.execution.sandbox.landlock import LandlockSandbox
from zuno.execution.sandbox.none import NoSandbox
from zuno.execution.sandbox.policy import SandboxError
from zuno.execution.sandbox.probing import probe_bubblewrap, probe_landlock
from zuno.execution.sandbox.selection import policy_for, sandbox_report, select_sandbox


@pytest.fixture
def without_bwrap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Probes run as if bwrap were not installed (PATH without it)."""
    probe_landlock()  # probed with the real PATH (its probe runs `true`), and cached
    probe_bubblewrap.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")
    yield
    probe_bubblewrap.cache_clear()


def test_both_real_sandboxes_probe_as_available() -> None:
    bwrap = probe_bubblewrap()
    landlock = probe_landlock()
    assert bwrap.available, bwrap.detail
    assert landlock.available, landlock.detail
    assert landlock.abi is not None and landlock.abi >= 4
    assert landlock.restricts_network


def test_auto_prefers_bubblewrap() -> None:
    assert isinstance(select_sandbox(SandboxSettings()), BubblewrapSandbox)


def test_each_kind_can_be_named() -> None:
    assert isinstance(select_sandbox(SandboxSettings(kind="bubblewrap")), BubblewrapSandbox)
    assert isinstance(select_sandbox(SandboxSettings(kind="landlock")), LandlockSandbox)
    assert isinstance(select_sandbox(SandboxSettings(kind="none")), NoSandbox)


def test_full_access_runs_unsandboxed() -> None:
    assert isinstance(select_sandbox(SandboxSettings(mode="full-access")), NoSandbox)


@pytest.mark.usefixtures("without_bwrap")
def test_a_named_sandbox_that_cannot_start_is_an_error_not_a_fallback() -> None:
    with pytest.raises(SandboxError, match="bwrap is not installed"):
        select_sandbox(SandboxSettings(kind="bubblewrap"))


@pytest.mark.usefixtures("without_bwrap")
def test_auto_falls_to_landlock_but_never_to_none() -> None:
    assert isinstance(select_sandbox(SandboxSettings()), LandlockSandbox)


@pytest.mark.usefixtures("without_bwrap")
def test_the_report_shows_the_startup_error() -> None:
    report = sandbox_report(SandboxSettings(kind="bubblewrap"))
    data = report.as_dict()
    assert not report.ok
    assert data["selected"] is None
    assert "bubblewrap" in data["error"]
    assert [b["name"] for b in data["backends"]] == ["bubblewrap", "landlock"]


def test_the_report_names_the_selected_sandbox() -> None:
    data = sandbox_report().as_dict()
    assert data["ok"] is True
    assert data["selected"] == "bubblewrap"
    assert data["mode"] == "workspace-write"
    assert data["network"] is False


def test_default_timeout_over_the_maximum_is_refused() -> None:
    with pytest.raises(ValidationError, match="timeout_default"):
        SandboxSettings(timeout_default=700, timeout_max=600)


def test_unknown_settings_are_refused() -> None:
    with pytest.raises(ValidationError):
        SandboxSettings.model_validate({"kind": "docker"})


def test_secret_looking_variables_are_removed_case_insensitively() -> None:
    env = {
        "GITHUB_TOKEN": "t",
        "npm_token": "t",
        "OPENAI_API_KEY": "k",
        "MY_SECRET_THING": "s",
        "DB_PASSWORD": "p",
        "PATH": "/bin",
        "HOME": "/root",
    }
    kept = command_environment(SandboxSettings().env_remove, env)
    assert kept == {"PATH": "/bin", "HOME": "/root"}


def test_the_removal_list_is_configurable() -> None:
    # A configured list adds to the built-in patterns; it never replaces them.
    env = {"GITHUB_TOKEN": "t", "INTERNAL_URL": "u", "HOME": "/h"}
    kept = command_environment(SandboxSettings(env_remove=("INTERNAL_*",)).env_remove, env)
    assert kept == {"HOME": "/h"}


def test_relative_writable_roots_are_taken_from_the_workspace(tmp_path: Path) -> None:
    policy = policy_for(SandboxSettings(writable_roots=("build", "/opt/cache")), tmp_path)
    assert policy.writable_roots == (tmp_path / "build", Path("/opt/cache"))
    assert policy.network is False
