"""How the PostgreSQL store connects: so that a dead peer is noticed, and its locks go.

A worker may lose its network, be paused or die in the middle of a
transaction. Left alone, its connection (and the row locks its transaction
holds) would stay open on the server for as long as TCP takes to give up:
minutes, during which no other worker can take its session over. Every
connection of the store therefore asks for:

- TCP keepalives (``keepalives_idle`` 5 s, then every 2 s, 3 missed: a silent
  peer is dropped after about 11 s) and ``tcp_user_timeout`` 10 s (data sent
  but not acknowledged for that long drops the connection), on both sides;
- ``idle_in_transaction_session_timeout`` 10 s: the server ends a session that
  sits in an open transaction without sending anything, and rolls it back,
  releasing its locks (Zuno's transactions are pipelined: they never wait on
  anything but the network);
- ``lock_timeout`` 2 s (or a sixth of the lease, if that is shorter): no
  statement waits longer for a row lock, so a wait never holds the store past
  the lease's fence margin (see :mod:`zuno.durability.fencing`); a ``--wait`` loop asks
  again until its own deadline instead;
- ``connect_timeout`` 10 s.

A setting the connection string already gives is kept as given (``options``
are added to, never replaced). ``ZUNO_PG_IDLE_TX_TIMEOUT`` and
``ZUNO_PG_LOCK_TIMEOUT`` (seconds) change the two server settings.
"""

from __future__ import annotations

import os

import psycopg
from psycopg.conninfo import conninfo_to_dict

__all__ = [
    "IDLE_IN_TRANSACTION_SECONDS",
    "LOCK_TIMEOUT_SECONDS",
    "connection_settings",
    "describe_dsn",
]

IDLE_IN_TRANSACTION_SECONDS = 10.0
"""How long the server keeps a session idle inside a transaction before ending it."""

LOCK_TIMEOUT_SECONDS = 2.0
"""How long a statement waits for a lock before it fails (and its caller may try again)."""

_CLIENT = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
    "connect_timeout": "10",
}


def _seconds(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value:
        try:
            seconds = float(value)
        except ValueError:
            return default
        if seconds >= 0:
            return seconds
    return default


def connection_settings(dsn: str) -> dict[str, str]:
    """Keyword arguments for ``psycopg.connect(dsn, **them)``: what the DSN does not say."""
    given = conninfo_to_dict(dsn)
    settings = {k: v for k, v in _CLIENT.items() if k not in given}
    options = str(given.get("options") or "")
    idle = _seconds("ZUNO_PG_IDLE_TX_TIMEOUT", IDLE_IN_TRANSACTION_SECONDS)
    from zuno.durability.workers import lease_seconds

    lock = _seconds("ZUNO_PG_LOCK_TIMEOUT", min(LOCK_TIMEOUT_SECONDS, lease_seconds() / 6))
    server = {
        "idle_in_transaction_session_timeout": f"{round(idle * 1000)}ms",
        "lock_timeout": f"{round(lock * 1000)}ms",
        # The server's side of the same TCP rules: a dead client's session ends too.
        "tcp_keepalives_idle": "5",
        "tcp_keepalives_interval": "2",
        "tcp_keepalives_count": "3",
        "tcp_user_timeout": "10000",
    }
    added = [f"-c {name}={value}" for name, value in server.items() if name not in options]
    if added:
        settings["options"] = " ".join([options, *added]).strip()
    return settings


def describe_dsn(dsn: str) -> str:
    """The server and database of a connection string, as people read it (no password)."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "the PostgreSQL server of --db (or ZUNO_DB)"
    user = f"{info['user']}@" if info.get("user") else ""
    port = f":{info['port']}" if info.get("port") else ""
    return f"postgresql://{user}{info.get('host') or 'localhost'}{port}/{info.get('dbname', '')}"
