"""What can go wrong with a store, as errors a person can act on.

::

    StoreError                 the store cannot be used as asked (one line: what, then what to do)
    ├── StoreUnavailable       it cannot be opened, reached or locked right now
    └── StoreVersionError      its schema is newer than this Zuno, or needs an upgrade
                               that a read-only command does not do
"""

from __future__ import annotations

__all__ = ["StoreError", "StoreUnavailable", "StoreVersionError"]


class StoreError(Exception):
    """The store cannot be used as asked; the message says what is wrong and what to do."""


class StoreUnavailable(StoreError):
    """The store cannot be opened, reached or locked (a corrupt file, a folder, a dead server)."""


class StoreVersionError(StoreError):
    """The store's schema is newer than this Zuno supports (or needs an upgrade first)."""
