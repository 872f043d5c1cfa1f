"""The environment a command receives: the runtime's, minus secret-looking names."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase

__all__ = ["command_environment"]


def command_environment(
    remove: Iterable[str],
    base: Mapping[str, str] | None = None,
    *,
    keep: Iterable[str] = (),
) -> dict[str, str]:
    """base (the process environment by default) without variables matching remove.

    Patterns are shell globs matched case-insensitively (``*_TOKEN`` removes
    ``GITHUB_TOKEN`` and ``npm_token``). A name in keep (exact, case-sensitive)
    stays whatever pattern matches it: it is passed on purpose.
    """
    source = os.environ if base is None else base
    patterns = [p.upper() for p in remove]
    kept = frozenset(keep)
    return {
        name: value
        for name, value in source.items()
        if name in kept or not any(fnmatchcase(name.upper(), p) for p in patterns)
    }
