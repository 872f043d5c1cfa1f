"""What the command server imports once, and how it tells that this still holds.

Before it listens, the server imports what short commands use (:data:`PRELOAD`,
every built-in tool) and finishes the pydantic models and typer's commands, so
that a forked child starts warm. While it imports, ``os.environ`` is a
:class:`RecordingEnviron`: a variable read then is part of the server's world,
and a caller with another value is not served. A :class:`Fingerprint` of the
code on disk says when the server has gone stale.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path

__all__ = ["PRELOAD", "Fingerprint", "RecordingEnviron", "preload"]


class RecordingEnviron(MutableMapping[str, str]):
    """``os.environ`` while the server imports: notes which variables were read.

    A module that reads a variable when it is imported keeps what it read; a
    caller whose value differs cannot be served by this server.
    """

    def __init__(self, real: MutableMapping[str, str]) -> None:
        self.real = real
        self.read: set[str] = set()
        self.everything = False
        self.recording = True

    def _note(self, key: object) -> None:
        if self.recording and isinstance(key, str):
            self.read.add(key)

    def __getitem__(self, key: str) -> str:
        self._note(key)
        return self.real[key]

    def __setitem__(self, key: str, value: str) -> None:
        self.real[key] = value

    def __delitem__(self, key: str) -> None:
        del self.real[key]

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return key in self.real

    def __iter__(self) -> Iterator[str]:
        if self.recording:
            self.everything = True
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)

    def copy(self) -> dict[str, str]:
        if self.recording:
            self.everything = True
        return dict(self.real)


PRELOAD = (
    "anyio",
    "anyio._backends._asyncio",
    "anyio._core._signals",
    "encodings.ascii",
    "typer.main",
    "typer._adapters",
    "typer._click.decorators",
    "typer._click._textwrap",
    "rich.console",
    "rich.markup",
    "rich.table",
    "rich.text",
    "rich.syntax",
    "rich._emoji_codes",
    "rich.markdown",
    "rich.panel",
    "typer.rich_utils",
    "zuno.cli",
    "zuno.cli.render",
    "zuno.cli.live",
    "zuno.cli.transcript",
    "zuno.config.loading",
    "zuno.dispatch.dispatcher",
    "zuno.session.runtime",
    "zuno.durability.store.sqlite",
    "zuno.cli.doctor",
    "zuno.workspace.checkpoints.store",
    "zuno.durability.file_versions",
)
"""What short commands import, imported once by the server (a missing one is skipped)."""


def preload() -> None:
    """Import (and warm) what short commands use, before any request."""
    import importlib

    from pydantic.plugin._loader import get_plugins  # pyright: ignore[reportPrivateImportUsage]

    from zuno.session.builtin_tools import BUILTINS

    modules = [*PRELOAD, *(entry.home.partition(":")[0] for entry in BUILTINS)]
    for module in modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    get_plugins()  # pydantic's scan of installed plugins, done once
    _complete_models()
    from zuno.cli.main import prebuild

    prebuild()  # typer's per-option adapters, built once


def _complete_models() -> None:
    """Finish every pydantic model whose schema is built on first use (config, tool arguments)."""
    from pydantic import BaseModel

    pending: list[type[BaseModel]] = [BaseModel]
    seen: set[type[BaseModel]] = set()
    while pending:
        model = pending.pop()
        for sub in model.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                pending.append(sub)
    for model in seen:
        if not model.__pydantic_complete__:
            # A model that cannot be finished yet is finished on first use, as without a server.
            with contextlib.suppress(Exception):
                model.model_rebuild()


class Fingerprint:
    """The code on disk when the server started, told by content rather than by mtime.

    Each ``.py`` of the package and each file of a module the server imported
    (its dependencies) is known by its inode, size and inode change time: an
    edit changes the change time even when it keeps the mtime and the size
    (``touch -r``, ``os.utime``), and a file replaced by a rename has another
    inode. The folders on the search path are known by mtime and inode (a
    package installed or removed).
    """

    def __init__(self) -> None:
        self.package = Path(__file__).resolve().parents[1]  # the zuno package
        self.modules = sorted(
            {
                path
                for module in list(sys.modules.values())
                if isinstance(path := getattr(module, "__file__", None), str)
                and not path.startswith(str(self.package))
            }
        )
        self.taken = self._take()

    def _take(self) -> dict[str, tuple[int, int, int]]:
        seen: dict[str, tuple[int, int, int]] = {}
        for entry in sys.path:
            try:
                info = os.stat(entry or ".")
            except OSError:
                continue
            seen[entry] = (info.st_mtime_ns, info.st_ino, 0)
        for folder, dirs, files in os.walk(self.package):
            # Compiled bytecode is written by any process that imports: not a change.
            dirs[:] = [name for name in dirs if name != "__pycache__"]
            info = os.stat(folder)
            seen[folder] = (info.st_mtime_ns, info.st_ino, 0)
            for name in files:
                if name.endswith(".py"):
                    _note_file(seen, os.path.join(folder, name))
        for path in self.modules:
            _note_file(seen, path)
        return seen

    def changed(self) -> bool:
        return self._take() != self.taken


def _note_file(seen: dict[str, tuple[int, int, int]], path: str) -> None:
    try:
        info = os.stat(path)
    except OSError:
        seen[path] = (-1, -1, -1)
        return
    seen[path] = (info.st_ctime_ns, info.st_size, info.st_ino)
