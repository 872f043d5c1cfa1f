"""Where a command writes: rich consoles made on first use, and JSON for programs.

Importing rich's console takes tens of milliseconds; ``zuno --help``, a command
that prints plain text and one that fails before printing do not pay for it.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["err", "escape", "lazy_console", "out", "print_json"]


class _LazyConsole:
    """A rich :class:`~rich.console.Console` made when first used.

    Importing rich's console takes tens of milliseconds; ``zuno --help`` and a
    command that fails before printing should not pay for it.
    """

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


def lazy_console(**options: Any) -> Console:
    """A console with these ``Console(...)`` options, built on first use."""
    return cast("Console", _LazyConsole(**options))


def escape(text: str) -> str:
    """``text`` with rich markup escaped (:func:`rich.markup.escape`, imported on use)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


out = lazy_console(highlight=False, soft_wrap=True)


err = lazy_console(stderr=True, highlight=False)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
