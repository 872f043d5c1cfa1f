"""Package names imported on first use (PEP 562), so importing a package is cheap.

``import zuno.config.lsp`` runs ``zuno/integrations/lsp/__init__.py`` first; when that
file imports the client, the pool and every message class, a command that
only reads the configuration pays for all of them. A package lists where
each public name lives instead, and the module is imported when the name is
first used::

    __getattr__, __dir__ = lazy_names(__name__, {"LspClient": "zuno.integrations.lsp.client", ...})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose names live in ``homes``.

    Args:
        package: The package's ``__name__``.
        homes: Each public name and the module that defines it.
    """

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this hook
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return __getattr__, __dir__
