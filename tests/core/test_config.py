"""zuno.json: defaults, ranges, merging, and errors that say what to fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zuno.config.loading import ConfigError, config_schema, load_config
from zuno.config.trust import trust


def write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)


def test_defaults(workspace: Path) -> None:
    config = load_config(workspace)
    assert config.concurrency.tool_calls == 8
    assert config.concurrency.delegations == 8
    assert config.concurrency.mcp_connections == 8
    assert config.concurrency.lsp_requests == 4
    assert (config.tool_output.max_bytes, config.tool_output.max_lines) == (51200, 2000)
    assert config.permission.mode == "strict" and config.permission.rules == []


@pytest.mark.parametrize("value", [0, 65, -1])
def test_concurrency_range_is_enforced_with_a_clear_error(workspace: Path, value: int) -> None:
    write(workspace / "zuno.json", {"concurrency": {"tool_calls": value}})
    with pytest.raises(ConfigError) as info:
        load_config(workspace)
    message = str(info.value)
    assert str(workspace / "zuno.json") in message
    assert "concurrency.tool_calls" in message and str(value) in message
    assert "1..=64" in message


def test_unknown_key_is_named(workspace: Path) -> None:
    write(workspace / "zuno.json", {"tool_outptu": {}})
    with pytest.raises(ConfigError, match="unknown key 'tool_outptu'"):
        load_config(workspace)


@pytest.mark.parametrize(
    ("data", "suggested"),
    [
        ({"permision": {"mode": "strict"}}, "did you mean 'permission'?"),
        ({"permission": {"mdoe": "strict"}}, "did you mean 'permission.mode'?"),
        ({"agents": {"mine": {"max_step": 3}}}, "did you mean 'agents.mine.max_steps'?"),
    ],
    ids=["top", "nested", "in-a-map"],
)
def test_unknown_key_gets_the_closest_known_one(
    workspace: Path, data: dict[str, object], suggested: str
) -> None:
    write(workspace / "zuno.json", data)
    with pytest.raises(ConfigError) as info:
        load_config(workspace)
    assert suggested in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_key_far_from_any_lists_the_known_ones(workspace: Path) -> None:
    write(workspace / "zuno.json", {"concurrency": {"zzzzzz": 1}})
    with pytest.raises(ConfigError, match="one of: delegations, lsp_requests"):
        load_config(workspace)


def test_bad_json_names_line_and_column(workspace: Path) -> None:
    write(workspace / "zuno.json", '{\n  "tools": {\n    "read": tru\n  }\n}')
    with pytest.raises(ConfigError, match=r"line 3, column"):
        load_config(workspace)


def test_bad_rule_action(workspace: Path) -> None:
    write(
        workspace / "zuno.json",
        {"permission": {"rules": [{"tool": "shell", "pattern": "rm", "action": "maybe"}]}},
    )
    with pytest.raises(ConfigError, match=r"permission\.rules\.0\.action"):
        load_config(workspace)


def test_trusted_workspace_file_wins_key_by_key(workspace: Path, tmp_path: Path) -> None:
    user = tmp_path / "user" / "zuno.json"
    write(user, {"concurrency": {"tool_calls": 2, "delegations": 3}, "tools": {"webfetch": False}})
    write(workspace / "zuno.json", {"concurrency": {"tool_calls": 5}})
    trust(workspace)
    config = load_config(workspace, user_file=user)
    assert config.concurrency.tool_calls == 5
    assert config.concurrency.delegations == 3
    assert config.tools == {"webfetch": False}
    assert config.sources == [str(user), str(workspace / "zuno.json")]


def test_untrusted_workspace_file_only_lowers(workspace: Path, tmp_path: Path) -> None:
    user = tmp_path / "user" / "zuno.json"
    write(user, {"concurrency": {"tool_calls": 2, "delegations": 3}})
    write(workspace / "zuno.json", {"concurrency": {"tool_calls": 5, "delegations": 1}})
    config = load_config(workspace, user_file=user)
    assert (config.concurrency.tool_calls, config.concurrency.delegations) == (2, 1)
    assert config.untrusted_ignored == ["concurrency.tool_calls"]
    assert config.sources == [str(user), str(workspace / "zuno.json")]


def test_error_in_user_file_names_the_user_file(workspace: Path, tmp_path: Path) -> None:
    user = tmp_path / "user" / "zuno.json"
    write(user, {"tool_output": {"max_lines": 1}})
    write(workspace / "zuno.json", {})
    with pytest.raises(ConfigError) as info:
        load_config(workspace, user_file=user)
    assert str(user) in str(info.value) and "tool_output.max_lines" in str(info.value)


def test_schema_describes_every_key() -> None:
    schema = config_schema()
    assert set(schema["properties"]) >= {
        "tools",
        "concurrency",
        "tool_output",
        "permission",
        "agents",
        "hooks",
    }
    assert "sources" not in schema["properties"]
