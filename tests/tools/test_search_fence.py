"""Permission rule patterns as rg exclusions: rg leaves out exactly what the rule matches.

The result filter of :mod:`zuno.policy.search_fence` would catch what the globs miss,
so these tests switch it off and judge the globs alone against the rule
matcher, with real rg listing a real tree: a glob that left out too little
would make rg read denied files, one that left out too much would hide
allowed ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zuno.config.permission import PermissionRule
from zuno.execution.ripgrep._search import list_files
from zuno.execution.ripgrep._select import Exclusion
from zuno.policy.permissions import path_pattern_matches
from zuno.policy.search_fence import search_exclusion

FILES = [
    "a.pem",
    "a.txt",
    ".env",
    "sub/.env",
    "sub/b.pem",
    "sub/c.key",
    "sub/deep/d.pem",
    "sub/deep/e.txt",
    "we[ir]d.txt",
    "x{y}.txt",
    "secrets/k.txt",
    "secrets/inner/k2.txt",
    "other/secrets/k3.txt",
]

PATTERNS = [
    ".env",
    "*.pem",
    "**/*.pem",
    "sub/*.key",
    "sub/**",
    "secrets/**",
    "**/secrets/**",
    "we[ir]d.txt",
    "x{y}.txt",
    "sub/deep/?.txt",
    "**/.env",
    "sub/**/*.pem",
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fence") / "ws"
    for name in FILES:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")
    return root


def rule(pattern: str) -> PermissionRule:
    return PermissionRule(tool="*", pattern=pattern, action="deny")


async def listed(root: Path, folder: str, patterns: list[str]) -> set[str]:
    start = root / folder if folder != "." else root
    fence = search_exclusion([rule(p) for p in patterns], "glob", str(start), str(root))
    globs_only = Exclusion(fence.globs, None)
    found = await list_files(start, hidden=True, limit=1000, exclusion=globs_only)
    prefix = "" if folder == "." else folder + "/"
    return {prefix + p for p in found.items}


def expected(folder: str, patterns: list[str]) -> set[str]:
    inside = [f for f in FILES if folder == "." or f.startswith(folder + "/")]
    return {f for f in inside if not any(path_pattern_matches(p, f) for p in patterns)}


@pytest.mark.anyio
@pytest.mark.parametrize("folder", [".", "sub", "sub/deep", "other"])
@pytest.mark.parametrize("pattern", PATTERNS)
async def test_each_pattern_excludes_what_it_matches(tree: Path, folder: str, pattern: str) -> None:
    assert await listed(tree, folder, [pattern]) == expected(folder, [pattern])


@pytest.mark.anyio
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    patterns=st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=4),
    folder=st.sampled_from([".", "sub", "sub/deep", "secrets", "other"]),
)
async def test_patterns_together(tree: Path, patterns: list[str], folder: str) -> None:
    if any(path_pattern_matches(p, folder) for p in patterns):
        return  # a denied root is refused before any search (the pre-flight)
    assert await listed(tree, folder, patterns) == expected(folder, patterns)


@pytest.mark.anyio
async def test_the_filter_catches_what_no_glob_can_say(tree: Path) -> None:
    # "s**k.txt" crosses folders in a rule ("**" inside a name); rg has no such glob.
    fence = search_exclusion([rule("s**k.txt")], "glob", str(tree), str(tree))
    assert fence.globs == ()
    found = await list_files(tree, hidden=True, limit=1000, exclusion=fence)
    assert "secrets/k.txt" not in found.items and "a.txt" in found.items
