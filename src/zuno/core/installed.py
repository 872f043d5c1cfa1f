"""This Zuno's version as installed, read once from the package's metadata.

A module of its own so that what reports the version (the CLI, the MCP
server, telemetry) need not import the package's public face; it is
re-exported as :func:`zuno.installed_version`.
"""

from __future__ import annotations

__all__ = ["installed_version"]

_VERSION: list[str] = []


def installed_version() -> str:
    """This Zuno's version as installed (``unknown`` when run from a bare source tree).

    importlib.metadata costs more than most imports: it is read once, on first use.
    """
    if not _VERSION:
        from importlib.metadata import PackageNotFoundError, version

        try:
            _VERSION.append(version("zuno"))
        except PackageNotFoundError:
            _VERSION.append("unknown")
    return _VERSION[0]
