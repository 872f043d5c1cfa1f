"""Folder trust: which workspaces' ``zuno.json`` the user has accepted, and in which version.

A record maps a workspace's real path to the SHA-256 of its ``zuno.json``
content at the moment the user trusted it. The records live in
``trust.json`` beside the user's own ``zuno.json`` (so ``$ZUNO_CONFIG_HOME``
moves them too); a file whose content no longer matches its record is
untrusted again until the user trusts the new version.

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
    "revoke",
    "trust",
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
    from zuno.config import user_config_path

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


def trusted_folders() -> dict[str, str]:
    """Every record: real folder path -> SHA-256 of the trusted ``zuno.json``."""
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
    return {str(k): v for k, v in cast(dict[str, Any], folders).items() if isinstance(v, str)}


def is_trusted(workspace: Path, content: bytes | None = None) -> TrustState:
    """The trust state of ``workspace``'s ``zuno.json``.

    Args:
        workspace: The workspace folder.
        content: The file's content when the caller already read it (so the
            state describes exactly the bytes it is about to use); read from
            disk otherwise.
    """
    if content is None:
        try:
            content = workspace_file(workspace).read_bytes()
        except FileNotFoundError:
            return TrustState.NO_FILE
        except OSError as exc:
            raise TrustError(
                f"{workspace_file(workspace)}: cannot be read: {exc.strerror}"
            ) from exc
    recorded = trusted_folders().get(_key(workspace))
    if recorded is None:
        return TrustState.UNTRUSTED
    if recorded != content_digest(content):
        return TrustState.CHANGED
    return TrustState.TRUSTED


def trust(workspace: Path, digest: str | None = None) -> str:
    """Trust ``workspace``'s ``zuno.json`` as it is now; returns the recorded digest.

    Args:
        workspace: The workspace folder.
        digest: The digest of the content the user was shown. Recording it
            (instead of re-reading the file) means a file swapped between the
            question and the answer stays untrusted.

    Raises:
        TrustError: There is no ``zuno.json`` to trust, or the records cannot be written.
    """
    if digest is None:
        path = workspace_file(workspace)
        try:
            digest = content_digest(path.read_bytes())
        except FileNotFoundError:
            raise TrustError(f"{workspace} has no zuno.json; there is nothing to trust") from None
        except OSError as exc:
            raise TrustError(f"{path}: cannot be read: {exc.strerror}") from exc
    with _locked():
        folders = trusted_folders()
        folders[_key(workspace)] = digest
        _write(folders)
    return digest


def revoke(workspace: Path) -> bool:
    """Forget the trust of ``workspace``; True when there was a record."""
    with _locked():
        folders = trusted_folders()
        found = folders.pop(_key(workspace), None) is not None
        if found:
            _write(folders)
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


def _write(folders: dict[str, str]) -> None:
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
