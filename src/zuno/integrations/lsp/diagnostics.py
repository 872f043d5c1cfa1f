"""The diagnostics a server published, and whether they match what it was sent.

Servers push diagnostics (``textDocument/publishDiagnostics``) whenever they
like; Zuno asks for them only when the ``lsp`` tool does. Every publication is
numbered, so a document can tell whether its diagnostics were redone since
its text was last sent (for servers that leave out the version) and since
changes to other files were last reported (which may change them without a
new version).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lsprotocol import types

from zuno.integrations.lsp.documents import OpenDocument
from zuno.integrations.lsp.protocol import converter

__all__ = ["PublishedDiagnostics"]


@dataclass(slots=True)
class _Published:
    version: int | None
    serial: int
    diagnostics: list[types.Diagnostic] = field(default_factory=lambda: [])


class PublishedDiagnostics:
    """The last diagnostics published for each document, numbered in order of arrival."""

    def __init__(self) -> None:
        """No diagnostics yet."""
        self._by_uri: dict[str, _Published] = {}
        self._serial = 0

    @property
    def serial(self) -> int:
        """How many publications came so far (the number of the last one)."""
        return self._serial

    def take(self, params: Any) -> None:
        """Record the ``params`` of one ``publishDiagnostics`` notification.

        A publication that is not valid LSP is dropped, as if never sent.
        """
        try:
            published = converter().structure(params, types.PublishDiagnosticsParams)
        except Exception:  # cattrs' validation errors, and its hooks' own
            return
        self._serial += 1
        self._by_uri[published.uri] = _Published(
            published.version, self._serial, list(published.diagnostics)
        )

    def covers(self, doc: OpenDocument) -> bool:
        """Whether diagnostics were published for the version of ``doc`` last sent."""
        entry = self._by_uri.get(doc.uri)
        if entry is None:
            return False
        if entry.version is not None:
            return entry.version >= doc.version
        return entry.serial > doc.published_before

    def redone_after_others_changed(self, doc: OpenDocument) -> bool:
        """Whether ``doc``'s diagnostics came after changes to other files were reported.

        True as well when no such changes are pending for ``doc``.
        """
        changed_at = doc.others_changed_at
        if changed_at is None:
            return True
        entry = self._by_uri.get(doc.uri)
        return entry is not None and entry.serial > changed_at

    def of(self, uri: str) -> list[types.Diagnostic]:
        """The diagnostics last published for ``uri`` (a copy; empty when none came)."""
        entry = self._by_uri.get(uri)
        return list(entry.diagnostics) if entry is not None else []

    def forget(self, uri: str) -> None:
        """Drop what was published for ``uri`` (the document was closed)."""
        self._by_uri.pop(uri, None)
