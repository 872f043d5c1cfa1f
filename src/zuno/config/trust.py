"""Folder trust: which workspaces' ``zuno.json`` the user has accepted, and in which version.

A record maps a workspace's real path to the SHA-256 of its ``zuno.json``
content at the moment the user trusted it, and of every file inside the
workspace that the configuration runs (see :mod:`zuno.config.trust_pins`). The
records live in ``trust.json`` beside the user's own ``zuno.json`` (so
``$ZUNO_CONFIG_HOME`` moves them too); a workspace whose ``zuno.json`` or any
pinned file no longer matches its record is untrusted again until the user
trusts the new version.

The records are rewritten atomically (a temporary file renamed over the old
one) under an advisory lock, so two ``zuno trust`` at once lose neither record
and a crash never leaves half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Generator
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

__all__ = [
    "TRUST_FILE_NAME",
    "TrustError",
    "TrustState",
    "content_digest",
    "is_trusted",
    "pinned_files",
    "pinned_now",
    "revoke",
    "trust",
    "trust_detail",
    "trust_file",
    "trusted_folders",
    "workspace_file",
]

TRUST_FILE_NAME = "trust.json"
_WORKSPACE_FILE = "zuno.json"


class TrustState(StrEnum):
    """What the user said about a workspace's ``zuno.json``."""

    TRUSTED = "trusted"
    """Trusted, and the file is the version that was trusted."""
    UNTRUSTED = "untrusted"
    """Never trusted (or the trust was revoked)."""
    CHANGED = "changed"
    """Trusted once, but the file changed since: untrusted until trusted again."""
    NO_FILE = "no workspace file"
    """The workspace has no ``zuno.json``: nothing to trust."""


class TrustError(Exception):
    """The trust records cannot be read or written; the message says what to fix."""


def trust_file() -> Path:
    """Where the trust records are kept: beside the user's ``zuno.json``."""
    from zuno.config.paths import user_config_path

    return user_config_path().parent / TRUST_FILE_NAME


def workspace_file(workspace: Path) -> Path:
    """The workspace's ``zuno.json``."""
    return workspace / _WORKSPACE_FILE


def content_digest(content: bytes) -> str:
    """The SHA-256 of a file's content, in hex: what a trust record holds."""
    return hashlib.sha256(content).hexdigest()


def _key(workspace: Path) -> str:
    # The real path: a symlinked or relative spelling of the same folder is the same record.
    return str(workspace.resolve())


def _records() -> dict[str, dict[str, Any]]:
    """Every record: real folder path -> ``{"sha256": ..., "files": {name: sha256}}``."""
    path = trust_file()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise TrustError(f"{path}: cannot be read: {exc.strerror}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrustError(
            f"{path}: not valid JSON ({exc.msg}); fix it or delete it and trust folders again"
        ) from exc
    folders: Any = cast(dict[str, Any], data).get("folders") if isinstance(data, dict) else None
    if not isinstance(folders, dict):
        raise TrustError(
            f'{path}: expected {{"folders": {{PATH: SHA256}}}}; fix it or delete it '
            "and trust folders again"
        )
    records: dict[str, dict[str, Any]] = {}
    for key, value in cast(dict[str, Any], folders).items():
        if isinstance(value, str):  # a record written before files were pinned
            records[str(key)] = {"sha256": value, "files": {}}
        elif isinstance(value, dict) and isinstance(
            digest := cast(dict[str, Any], value).get("sha256"), str
        ):
            files: Any = cast(dict[str, Any], value).get("files")
            pinned = cast(dict[str, Any], files) if isinstance(files, dict) else {}
            records[str(key)] = {
                "sha256": digest,
                "files": {str(k): v for k, v in pinned.items() if isinstance(v, str)},
            }
    return records


def trusted_folders() -> dict[str, str]:
    """Every record: real folder path -> SHA-256 of the trusted ``zuno.json``."""
    return {folder: record["sha256"] for folder, record in _records().items()}


def pinned_now(workspace: Path, content: bytes) -> dict[str, str]:
    """The files ``content`` (a ``zuno.json``) runs inside workspace, with their digests now."""
    from zuno.config.trust_pins import file_digests, named_files

    try:
        data: Any = json.loads(content)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return file_digests(workspace, named_files(workspace, cast(dict[str, Any], data)))


def pinned_files(workspace: Path) -> list[Path]:
    """The files the trust record of workspace pins (none when it has no record)."""
    record = _records().get(_key(workspace))
    files: dict[str, str] = record["files"] if record is not None else {}
    return [workspace / name for name in files]


def is_trusted(workspace: Path, content: bytes | None = None) -> TrustState:
    """The trust state of ``workspace``'s ``zuno.json`` (and of the files it runs).

    Args:
        workspace: The workspace folder.
        content: The file's content when the caller already read it (so the
            state describes exactly the bytes it is about to use); read from
            disk otherwise.
    """
    return trust_detail(workspace, content)[0]


def trust_detail(workspace: Path, content: bytes | None = None) -> tuple[TrustState, str | None]:
    """The trust state, and for ``changed`` which file changed (``zuno.json`` or a pinned one)."""
    if content is None:
        try:
            content = workspace_file(workspace).read_bytes()
        except FileNotFoundError:
            return TrustState.NO_FILE, None
        except OSError as exc:
            raise TrustError(
                f"{workspace_file(workspace)}: cannot be read: {exc.strerror}"
            ) from exc
    record = _records().get(_key(workspace))
    if record is None:
        return TrustState.UNTRUSTED, None
    if record["sha256"] != content_digest(content):
        return TrustState.CHANGED, _WORKSPACE_FILE
    files: dict[str, str] = record["files"]
    now = pinned_now(workspace, content)
    for name in sorted({*files, *now}):
        if files.get(name) != now.get(name):
            return TrustState.CHANGED, name
    return TrustState.TRUSTED, None


def trust(workspace: Path, digest: str | None = None, files: dict[str, str] | None = None) -> str:
    """Trust ``workspace``'s ``zuno.json`` and the files it runs as they are now.

    Args:
        workspace: The workspace folder.
        digest: The digest of the content the user was shown. Recording it
            (instead of re-reading the file) means a file swapped between the
            question and the answer stays untrusted.
        files: The pinned files and digests the user was shown (see
            :func:`pinned_now`); read from disk when omitted.

    Returns:
        The recorded digest of ``zuno.json``.

    Raises:
        TrustError: There is no ``zuno.json`` to trust, or the records cannot be written.
    """
    if digest is None or files is None:
        path = workspace_file(workspace)
        try:
            content = path.read_bytes()
        except FileNotFoundError:
            raise TrustError(f"{workspace} has no zuno.json; there is nothing to trust") from None
        except OSError as exc:
            raise TrustError(f"{path}: cannot be read: {exc.strerror}") from exc
        if digest is None:
            digest = content_digest(content)
        if files is None:
            files = pinned_now(workspace, content)
    with _locked():
        records = _records()
        records[_key(workspace)] = {"sha256": digest, "files": dict(sorted(files.items()))}
        _write(records)
    return digest


def revoke(workspace: Path) -> bool:
    """Forget the trust of ``workspace``; True when there was a record."""
    with _locked():
        records = _records()
        found = records.pop(_key(workspace), None) is not None
        if found:
            _write(records)
    return found


@contextlib.contextmanager
def _locked() -> Generator[None]:
    """Hold an exclusive lock for a read-modify-write of the records."""
    path = trust_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise TrustError(f"{path.parent}: cannot be written: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write(folders: dict[str, dict[str, Any]]) -> None:
    path = trust_file()
    text = json.dumps({"folders": dict(sorted(folders.items()))}, indent=2) + "\n"
    try:
        fd, tmp = tempfile.mkstemp(prefix=".trust-", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise TrustError(f"{path.parent}: cannot be written: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise TrustError(f"{path}: cannot be written: {exc.strerror}") from exc
