"""What can go wrong with a store, as errors a person can act on.

::

    StoreError                 the store cannot be used as asked (one line: what, then what to do)
    ├── StoreUnavailable       it cannot be opened, reached or locked right now
    ├── StoreVersionError      its schema is newer than this Zuno, or needs an upgrade
    │                          that a read-only command does not do
    └── SessionBusy            another live worker holds the session's lease
"""

from __future__ import annotations

__all__ = ["SessionBusy", "StoreError", "StoreUnavailable", "StoreVersionError"]


class StoreError(Exception):
    """The store cannot be used as asked; the message says what is wrong and what to do."""


class StoreUnavailable(StoreError):
    """The store cannot be opened, reached or locked (a corrupt file, a folder, a dead server)."""


class StoreVersionError(StoreError):
    """The store's schema is newer than this Zuno supports (or needs an upgrade first)."""


class SessionBusy(StoreError):
    """Another live worker holds the session (its lease has not expired).

    Attributes:
        session_id: The session asked for.
        owner: The worker id holding it.
        expires_at: When that worker's lease expires (epoch seconds, the database's
            clock), if it has one.
    """

    def __init__(
        self, message: str, session_id: str, owner: str | None, expires_at: float | None
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.owner = owner
        self.expires_at = expires_at
