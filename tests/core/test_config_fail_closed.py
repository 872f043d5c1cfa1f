"""zuno.json fails closed: unknown tool names, coerced types and half-quoted errors are refused.

Each case goes through the real command (``.venv/bin/zuno``, a new process,
the user's file under ``$ZUNO_CONFIG_HOME``) and through :func:`load_config`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from zuno.config.loading import Config, ConfigError, load_config
from zuno.dispatch.registry import ALL_NAMES, Registry
from zuno.session.builtin_tools import builtin_tools

ZUNO = Path(sys.executable).parent / "zuno"


def user_file() -> Path:
    return Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"


def write_user(data: object) -> None:
    path = user_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def zuno(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ZUNO), *args],
        cwd=workspace,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def refused(workspace: Path, data: object) -> tuple[str, str]:
    """Write ``data`` as the user's file; return the CLI's and the API's error text."""
    write_user(data)
    proc = zuno(workspace, "config", "show")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    with pytest.raises(ConfigError) as info:
        load_config(workspace)
    return proc.stderr, str(info.value)


# Tool names ------------------------------------------------------------------------


def test_a_misspelled_tool_switch_is_refused_with_the_closest_name(workspace: Path) -> None:
    for text in refused(workspace, {"tools": {"webfech": False}}):
        assert str(user_file()) in text
        assert "tools.webfech" in text
        assert "'webfetch'" in text  # the suggestion


def test_a_misspelled_tool_in_an_agent_list_is_refused(workspace: Path) -> None:
    data = {"agents": {"reviewer": {"tools": ["read", "grpe"]}}}
    for text in refused(workspace, data):
        assert "agents.reviewer.tools" in text and "'grpe'" in text
        assert "'grep'" in text


def test_an_mcp_tool_of_an_unconfigured_server_is_refused(workspace: Path) -> None:
    data = {
        "mcp": {"servers": {"github": {"command": "github-mcp"}}},
        "tools": {"mcp__githb__search": False},
    }
    for text in refused(workspace, data):
        assert "tools.mcp__githb__search" in text
        assert "'github'" in text  # the closest configured server


def test_a_pattern_outside_mcp_is_refused(workspace: Path) -> None:
    for text in refused(workspace, {"agents": {"a": {"tools": ["todo_*"]}}}):
        assert "'todo_*'" in text and "mcp__<server>__*" in text


def test_names_of_configured_mcp_servers_and_spec_tools_are_accepted(workspace: Path) -> None:
    write_user(
        {
            "mcp": {"servers": {"docs": {"command": "docs-mcp", "enabled": False}}},
            "tools": {"lsp": True, "mcp__docs__search": False, "webfetch": False},
            "agents": {"a": {"tools": ["read", "mcp__docs__*", "memory_propose", "edit"]}},
        }
    )
    proc = zuno(workspace, "config", "show")
    assert proc.returncode == 0, proc.stderr
    config = load_config(workspace)
    assert config.tools["mcp__docs__search"] is False


def test_a_workspace_file_may_name_a_server_of_the_user_file(workspace: Path) -> None:
    write_user({"mcp": {"servers": {"docs": {"command": "docs-mcp", "enabled": False}}}})
    (workspace / "zuno.json").write_text(json.dumps({"tools": {"mcp__docs__search": False}}))
    assert load_config(workspace).tools["mcp__docs__search"] is False


def test_program_tools_can_be_named_through_the_api(workspace: Path) -> None:
    """A program registering its own tools passes their names to load_config."""
    write_user({"tools": {"lookup": False}})
    with pytest.raises(ConfigError, match="lookup"):
        load_config(workspace)
    assert load_config(workspace, tool_names=["lookup"]).tools == {"lookup": False}


def test_every_builtin_tool_name_is_known() -> None:
    names = {t.name for t in builtin_tools(Config())}
    assert names <= ALL_NAMES


# Patterns on the surface ------------------------------------------------------------


def test_an_mcp_pattern_selects_and_switches_that_servers_tools() -> None:
    from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolResult
    from zuno.core.declarations import READ_ONLY_SAFE_PARALLEL

    def fake(name: str) -> Tool[Any]:
        class Fake(Tool[ToolArgs]):
            args_model = ToolArgs
            declaration = READ_ONLY_SAFE_PARALLEL
            description = "fake"

            async def run(self, args: ToolArgs, ctx: ToolContext) -> ToolResult:
                return ToolResult("")

        Fake.name = name
        return Fake()

    registry = Registry(
        [*builtin_tools(Config()), fake("mcp__docs__search"), fake("mcp__other__x")]
    )
    config = Config.model_validate({"agents": {"a": {"tools": ["read", "mcp__docs__*"]}}})
    assert registry.surface(config, config.agents["a"]).names == ["read", "mcp__docs__search"]
    off = Config.model_validate({"tools": {"mcp__docs__*": False}})
    names = registry.surface(off).names
    assert "mcp__docs__search" not in names and "mcp__other__x" in names
    # An exact switch wins over a pattern.
    mixed = Config.model_validate({"tools": {"mcp__docs__*": False, "mcp__docs__search": True}})
    assert "mcp__docs__search" in registry.surface(mixed).names


# Strict types ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"memory": {"enabled": "yes"}}, "memory.enabled"),
        ({"replay": {"require_inspection": "no"}}, "replay.require_inspection"),
        ({"concurrency": {"tool_calls": "8"}}, "concurrency.tool_calls"),
        ({"tools": {"lsp": "yes"}}, "tools.lsp"),
        ({"sandbox": {"network": "no"}}, "sandbox.network"),
        ({"web": {"max_redirects": "3"}}, "web.max_redirects"),
        ({"tool_output": {"max_lines": 100.0}}, "tool_output.max_lines"),
        ({"mcp": {"servers": {"a": {"command": "x", "trusted": 1}}}}, "mcp.servers.a.trusted"),
    ],
)
def test_values_of_the_wrong_type_are_refused_not_coerced(
    workspace: Path, data: dict[str, Any], key: str
) -> None:
    for text in refused(workspace, data):
        assert key in text


def test_the_python_models_are_strict_too() -> None:
    with pytest.raises(ValueError, match=r"memory\.enabled"):
        Config.model_validate({"memory": {"enabled": "yes"}})


def test_enum_values_in_mcp_declarations_still_read_from_json(workspace: Path) -> None:
    write_user(
        {"mcp": {"servers": {"a": {"command": "x", "tools": {"t": {"effect": "read_only"}}}}}}
    )
    declared = load_config(workspace).mcp.servers["a"].tools["t"]
    assert declared.effect is not None and declared.effect.value == "read_only"


# Error text -----------------------------------------------------------------------


def test_an_enum_error_keeps_its_closing_quote(workspace: Path) -> None:
    for text in refused(workspace, {"permission": {"mode": "strictt"}}):
        assert "permission.mode" in text
        assert '"strict"' in text and '"permissive"' in text, text


def test_the_schema_enumerates_the_tool_names(workspace: Path) -> None:
    proc = zuno(workspace, "config", "schema")
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    names = schema["properties"]["tools"]["propertyNames"]
    assert set(names["anyOf"][0]["enum"]) == ALL_NAMES
    assert names["anyOf"][1]["pattern"].startswith("^mcp__")
    agent = schema["$defs"]["AgentSettings"]["properties"]["tools"]
    items = next(v for v in agent["anyOf"] if v.get("type") == "array")["items"]
    assert set(items["anyOf"][0]["enum"]) == ALL_NAMES


# web_search needs a backend ---------------------------------------------------------


def test_web_search_is_offered_only_with_a_backend(workspace: Path) -> None:
    def names() -> list[str]:
        proc = zuno(workspace, "tools", "--json")
        assert proc.returncode == 0, proc.stderr
        return [row["name"] for row in json.loads(proc.stdout)["tools"]]

    assert "web_search" not in names()
    called = zuno(workspace, "call", "web_search", '{"queries": ["zuno"]}')
    assert called.returncode == 1
    assert "blocked: unavailable" in called.stdout
    assert "web.search" in called.stdout  # what to set, not "not enabled for this agent"
    write_user({"web": {"search": {"kind": "searxng", "base_url": "http://127.0.0.1:9"}}})
    assert "web_search" in names()
