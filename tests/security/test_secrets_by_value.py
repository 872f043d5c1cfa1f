"""Secrets are withheld from commands by their value as well as by their name.

Through the real ``zuno call`` and ``zuno doctor`` command lines: the secrets
are in the environment of the zuno process, the command prints its whole
environment, and none of the values may come back. ``sandbox.env_keep`` in
the user's configuration lets a named one through; ``zuno doctor`` names what
is withheld and never shows a value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest

from zuno.config.sandbox import DEFAULT_ENV_REMOVE
from zuno.execution.sandbox.environment import looks_like_credential, withheld_names

ZUNO = str(Path(sys.executable).with_name("zuno"))


def _secrets() -> dict[str, str]:
    """Variables whose names do not look secret, but whose values are credentials."""
    tag = uuid.uuid4().hex
    return {
        "DATABASE_URL": f"postgres://app:pw{tag}@db.internal:5432/app",
        "REDIS_URL": f"redis://:pw{tag}@cache:6379/0",
        "NPM_CONFIG__AUTH": f"dXNlcjpw{tag}",
        "GH_HELPER": f"ghp_{tag}{tag[:8]}",
        "CI_GITLAB": f"glpat-{tag[:24]}",
        "OPENAI_ORG_THING": f"sk-proj-{tag}",
        "SESSION_BEARER": f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ{tag[:10]}.{tag}",
        "AWS_ID": "AKIA" + tag[:16].upper(),
        "SLACK_HELPER": f"xoxb-1234-{tag}",
        "NPM_PUBLISH": "npm_" + (tag + tag)[:36],
    }


_PLAIN = {"PLAIN_SETTING": "https://example.com/a:b@c", "OTHER_PATHS": "/usr/bin:/bin"}


def _run(tmp_path: Path, args: list[str], env: dict[str, str], config: Mapping[str, object]) -> str:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "zuno.json").write_text(json.dumps(config))
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    full = {**os.environ, **env, "ZUNO_CONFIG_HOME": str(home), "ZUNO_DB": str(tmp_path / "z.db")}
    proc = subprocess.run(
        [ZUNO, *args],
        cwd=ws,
        env=full,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("kind", ["bubblewrap", "landlock", "none"])
def test_credentials_are_withheld_by_value(tmp_path: Path, kind: str) -> None:
    secrets = _secrets()
    config = {"permission": {"mode": "permissive"}, "sandbox": {"kind": kind}}
    call = ["call", "shell", '{"command": "env; echo done"}']
    out = _run(tmp_path, call, secrets | _PLAIN, config)
    assert "done" in out, out
    for name, value in secrets.items():
        assert value not in out, name
        assert f"{name}=" not in out, name
    for name, value in _PLAIN.items():
        assert f"{name}={value}" in out, out


def test_env_keep_lets_one_through(tmp_path: Path) -> None:
    secrets = _secrets()
    config = {
        "permission": {"mode": "permissive"},
        "sandbox": {"kind": "bubblewrap", "env_keep": ["DATABASE_URL"]},
    }
    out = _run(tmp_path, ["call", "shell", '{"command": "env; echo done"}'], secrets, config)
    assert f"DATABASE_URL={secrets['DATABASE_URL']}" in out, out
    assert secrets["REDIS_URL"] not in out


def test_doctor_names_what_is_withheld_and_shows_no_value(tmp_path: Path) -> None:
    secrets = _secrets()
    config = {"sandbox": {"kind": "bubblewrap", "env_keep": ["REDIS_URL"]}}
    env = secrets | {"MY_API_TOKEN": f"tok-{uuid.uuid4().hex}"}
    plain = _run(tmp_path, ["doctor", "--db", str(tmp_path / "d.db")], env, config)
    report = json.loads(
        _run(tmp_path, ["doctor", "--json", "--db", str(tmp_path / "d.db")], env, config)
    )
    withheld = report["sandbox"]["withheld_env"]
    assert "DATABASE_URL" in withheld and "MY_API_TOKEN" in withheld, withheld
    assert "REDIS_URL" not in withheld, withheld
    assert "DATABASE_URL" in plain and "MY_API_TOKEN" in plain, plain
    for value in env.values():
        assert value not in plain
        assert value not in json.dumps(report)


@pytest.mark.parametrize(
    "value",
    [
        "mysql://root:hunter2@localhost/db",
        "https://user:p%40ss@registry.example.com/simple",
        "amqp://guest:guest@rabbit:5672//",
        "Bearer ghs_" + "a" * 36,
        "github_pat_" + "A1b2" * 15,
        "xoxp-123-456-789-abcdef",
        "AKIAIOSFODNN7EXAMPLE",
        "sk-ant-api03-" + "x" * 40,
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "AIza" + "SyA-" * 8 + "abc",
        "hf_" + "q" * 34,
        "pypi-AgEIcHlwaS5vcmc" + "x" * 60,
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n",
        "https://hooks.slack.com/services/T000/B000/XXXX",
    ],
)
def test_credential_shapes_are_recognised(value: str) -> None:
    assert looks_like_credential(value)


@pytest.mark.parametrize(
    "value",
    [
        "/usr/local/bin:/usr/bin:/bin",
        "http://proxy.internal:3128",
        "git@github.com:org/repo.git",
        "ssh://git@github.com:22/org/repo",
        "https://example.com/a:b@c",
        "en_US.UTF-8",
        "/home/u/projects/task-runner-with-a-very-long-name",
        "xterm-256color",
        "scikit-learn==1.5.0",
    ],
)
def test_ordinary_values_are_passed(value: str) -> None:
    assert not looks_like_credential(value)


def test_auth_names_are_withheld_by_name() -> None:
    env = {"NPM_CONFIG__AUTH": "x", "ANTHROPIC_AUTH_TOKEN": "y", "SSH_AUTH_SOCK": "/run/a"}
    assert withheld_names(DEFAULT_ENV_REMOVE, env) == ["ANTHROPIC_AUTH_TOKEN", "NPM_CONFIG__AUTH"]
