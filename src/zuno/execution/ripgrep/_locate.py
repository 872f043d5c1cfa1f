"""Locating rg: ``$ZUNO_RG``, else the environment's rg, else ``PATH``; 14 or newer.

The answer, a failure included, is probed once per process and cached.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import anyio.to_thread

from zuno.execution.ripgrep._run import Ripgrep

__all__ = [
    "INSTALL_HINT",
    "MINIMUM_VERSION",
    "RipgrepUnavailable",
    "find_ripgrep",
    "find_ripgrep_async",
    "parse_version",
]

MINIMUM_VERSION: tuple[int, int, int] = (14, 0, 0)
"""The oldest rg accepted. 13 lacks behaviour the tools rely on (and Debian ships it)."""

INSTALL_HINT = (
    "install ripgrep 14 with `pip install ripgrep==14.1.0` "
    "(or `pip install --only-binary=ripgrep ripgrep`), put an rg >= 14 on PATH, "
    "or set ZUNO_RG to the path of one"
)

_ENV_VAR = "ZUNO_RG"
_VERSION_RE = re.compile(r"ripgrep\s+(\d+)\.(\d+)\.(\d+)")


class RipgrepUnavailable(RuntimeError):
    """No usable rg: it is missing, cannot run, or is older than 14."""


def parse_version(text: str) -> tuple[int, int, int] | None:
    """The version in the output of ``rg --version``, or None when there is none.

    Args:
        text: What ``rg --version`` printed, e.g. ``"ripgrep 14.1.0 (rev ...)"``.

    Returns:
        ``(major, minor, patch)``, or None if the text names no ripgrep version.
    """
    found = _VERSION_RE.search(text)
    if found is None:
        return None
    return (int(found.group(1)), int(found.group(2)), int(found.group(3)))


_cache: dict[str | None, Ripgrep | RipgrepUnavailable] = {}
_cache_lock = threading.Lock()


def find_ripgrep(*, refresh: bool = False) -> Ripgrep:
    """Locate and probe rg >= 14, once per process.

    The order is: ``$ZUNO_RG`` (a path or a command name; when set it is the
    only candidate), then ``rg`` beside the running interpreter and in the
    environment's scripts folder (where the ``ripgrep`` wheel puts it), then
    ``rg`` on ``PATH``. The answer, a failure included, is cached; pass
    ``refresh=True`` after installing rg.

    Returns:
        The probed executable.

    Raises:
        RipgrepUnavailable: No candidate exists, runs, or is new enough. The
            message says what was found and how to install a suitable rg.
    """
    key = os.environ.get(_ENV_VAR) or None
    with _cache_lock:
        cached = None if refresh else _cache.get(key)
        if cached is None:
            cached = _probe_candidates(key)
            _cache[key] = cached
    if isinstance(cached, RipgrepUnavailable):
        raise cached
    return cached


async def find_ripgrep_async() -> Ripgrep:
    """:func:`find_ripgrep` from async code (the first probe blocks, so it runs in a thread)."""
    cached = _cache.get(os.environ.get(_ENV_VAR) or None)
    if isinstance(cached, Ripgrep):
        return cached  # probed already: no thread to wake for a dictionary lookup
    return await anyio.to_thread.run_sync(find_ripgrep)


def _candidates(override: str | None) -> list[Path]:
    if override is not None:
        resolved = shutil.which(override) if os.sep not in override else override
        return [Path(resolved or override)]
    found: list[Path] = []
    # Not resolved: in a venv sys.executable is a symlink and rg sits beside the link.
    for folder in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        found.append(folder / "rg")
    on_path = shutil.which("rg")
    if on_path is not None:
        found.append(Path(on_path))
    unique: list[Path] = []
    for path in found:
        if path not in unique:
            unique.append(path)
    return unique


def _probe_candidates(override: str | None) -> Ripgrep | RipgrepUnavailable:
    problems: list[str] = []
    for path in _candidates(override):
        if not (path.is_file() and os.access(path, os.X_OK)):
            if override is not None:
                problems.append(f"{_ENV_VAR}={override} is not an executable file")
            continue
        probed = _probe(path)
        if isinstance(probed, Ripgrep):
            return probed
        problems.append(probed)
    if not problems:
        problems.append("no rg was found beside the Python interpreter or on PATH")
    return RipgrepUnavailable(f"ripgrep >= 14 is required: {'; '.join(problems)}; {INSTALL_HINT}")


def _probe(path: Path) -> Ripgrep | str:
    """The probed rg at ``path``, or why it cannot be used."""
    try:
        done = subprocess.run(
            [str(path), "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path} could not be run ({exc})"
    version = parse_version(done.stdout.decode("utf-8", errors="replace"))
    if done.returncode != 0 or version is None:
        return f"{path} did not report a ripgrep version"
    if version < MINIMUM_VERSION:
        return f"{path} is ripgrep {'.'.join(map(str, version))}, too old"
    return Ripgrep(path, version)
