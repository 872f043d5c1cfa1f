"""What a search must not return: permission rules turned into rg exclusions and a filter.

``grep`` and ``glob`` read or list every file under one root, so a rule on one
path inside it cannot be matched before the call runs. A deny on ``.env`` must
hold for them anyway. Which rules fence a search:

- deny and ask rules (a search cannot stop to ask about each file: it leaves
  them out, and reading one by name still asks), except an ask rule of the
  searching tool on the searched folder itself, which was asked before the
  search ran;
- of the searching tool, and of ``read``: a search shows what reading would,
  so a rule keeping ``read`` away from a file keeps ``grep`` and ``glob`` away.

Each rule pattern is re-anchored at the searched folder and given to rg as an
exclusion (rg then never opens those files), and every result path is matched
against the rules once more, along with the process secrets of
:mod:`zuno.workspace.real_paths`: the filter is what holds where a glob cannot say the
same thing as a rule pattern.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from fnmatch import fnmatchcase

from zuno.config.permission import PermissionRule
from zuno.execution.ripgrep._select import Exclusion
from zuno.policy.link_rules import link_refusal
from zuno.policy.permissions import path_pattern_matches
from zuno.workspace.real_paths import is_inside, proc_refusal, relative_subject

__all__ = ["file_link_refusal", "search_exclusion"]

_WHOLE = ("*", "**")
_GLOB_SPECIAL = str.maketrans({c: "\\" + c for c in "\\[]{}"})


def search_exclusion(
    rules: Sequence[PermissionRule], tool: str, root: str, workspace: str
) -> Exclusion:
    """The exclusion of a search by ``tool`` rooted at the real folder ``root``.

    Args:
        rules: The session's permission rules.
        tool: The searching tool (``grep``, ``glob``).
        root: The searched folder, a real absolute path.
        workspace: The workspace, a real absolute path.
    """
    subject = relative_subject(root, workspace)
    patterns = [rule.pattern for rule in rules if _fences(rule, tool, subject)]
    if any(p in _WHOLE for p in patterns):
        return Exclusion(("/**",), lambda rel: True)
    if not patterns and not is_inside("/proc", root):
        return Exclusion()  # nothing to leave out: no filter to pay for on every result
    base = root.rstrip("/")
    # grep shows content: a file whose other name (a hard link) a rule covers is left out.
    denied = [r.pattern for r in rules if r.action != "allow" and _fences(r, tool, subject)]
    reads_content = tool == "grep" and bool(denied)

    def skip(rel: str) -> bool:
        path = f"{base}/{rel}" if rel else base
        if proc_refusal(path) is not None:
            return True
        subject = relative_subject(path, workspace)
        if any(path_pattern_matches(p, subject) for p in patterns):
            return True
        if reads_content:
            try:
                return link_refusal(os.lstat(path), denied, workspace) is not None
            except OSError:
                return True  # gone since rg read it: what it was cannot be checked
        return False

    root_parts = [] if subject == "." else subject.split("/")
    globs: list[str] = []
    for pattern in patterns:
        for rest in _residuals(pattern.split("/"), root_parts):
            glob = _rg_glob(rest)
            if glob is not None and glob not in globs:
                globs.append(glob)
    return Exclusion(tuple(globs), skip)


def file_link_refusal(
    rules: Sequence[PermissionRule], tool: str, path: str, workspace: str
) -> str | None:
    """Why a search of the one file ``path`` must not show it: a hard link the rules may deny.

    See :mod:`zuno.policy.link_rules`; the patterns are those of the rules fencing a search
    of its folder.
    """
    folder = relative_subject(os.path.dirname(os.path.realpath(path)), workspace)
    denied = [r.pattern for r in rules if r.action != "allow" and _fences(r, tool, folder)]
    try:
        return link_refusal(os.stat(path), denied, workspace)
    except OSError:
        return None  # gone: rg finds nothing to show


def _fences(rule: PermissionRule, tool: str, root: str) -> bool:
    """Whether a rule keeps a search by ``tool`` rooted at ``root`` away from what it matches."""
    if rule.action == "allow":
        return False
    own = fnmatchcase(tool, rule.tool)
    if not own and not fnmatchcase("read", rule.tool):
        return False
    # An ask on the searched folder itself was put to the user before this
    # search ran (it is the search's own rule); the approval covers what is in it.
    covers_root = rule.pattern in _WHOLE or path_pattern_matches(rule.pattern, root)
    return not (rule.action == "ask" and own and covers_root)


def _residuals(pattern: list[str], root: list[str]) -> list[list[str]]:
    """What remains of a pattern's segments once the root's segments are matched.

    A remainder matches paths relative to the root exactly when the whole
    pattern matches them relative to the workspace. An empty list: the pattern
    cannot match anything under the root.
    """
    if not root:
        return [pattern] if pattern else []
    if not pattern:
        return []
    head, tail = pattern[0], pattern[1:]
    if head == "**":
        # "**" is zero or more whole folders: stop here, or let it take one more.
        return _residuals(tail, root) + _residuals(pattern, root[1:])
    if "**" in head or not path_pattern_matches(head, root[0]):
        return []
    return _residuals(tail, root[1:])


def _rg_glob(segments: list[str]) -> str | None:
    """Segments as an rg glob anchored at the searched folder, or None if rg cannot say it."""
    if not segments or any(s == "" or ("**" in s and s != "**") for s in segments):
        return None
    return "/" + "/".join(s if s == "**" else s.translate(_GLOB_SPECIAL) for s in segments)
