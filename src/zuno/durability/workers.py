"""Workers: who runs what, and whether they still do (leases on the database's clock).

Every process that runs calls is a *worker*. Its :class:`WorkerIdentity` names
the host (machine id and boot id), the PID namespace, the pid and the start
time of the process, as the text ``w1:<machine>:<boot>:<pidns>:<pid>:<start>``,
which is written as the ``runner`` of the rows it owns (a call's ``started``
row, a running job, a session).

A worker keeps a *lease*: a row of the ``workers`` table whose ``expires_at``
it pushes forward from a heartbeat thread (:class:`WorkerLease`). All times
are read from the database (``zuno_now()``), so no worker compares its own
clock with another machine's.

Another worker may settle or take a row owned by runner R
(:func:`runner_settleable`) only when R's lease has expired, or when R lives
in the same PID space and ``/proc`` says its process is gone (the fast path on
one machine). A paused (SIGSTOPped) owner is alive by ``/proc``: its rows wait
for its lease to expire. ``/proc`` is never read for a runner of another host
or namespace. Legacy runners (``pid:start``, written before leases) are judged
by ``/proc`` on a single-host store (SQLite) and have no lease anywhere else.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from zuno.durability.fencing import Watchdog, choose_clock, fence_clock

if TYPE_CHECKING:
    from zuno.durability.store.connection import StoreConnection

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "LeaseStore",
    "WorkerIdentity",
    "WorkerLease",
    "lease_seconds",
    "proc_is_ours",
    "runner_running",
    "runner_settleable",
    "settleable_in",
    "shared_lease",
    "this_worker",
]


class LeaseStore(Protocol):
    """What a worker's lease uses of the store it is held in (:class:`zuno.durability.store.Store`).

    A protocol, so that the lease need not import the stores, which take their
    worker's identity from here.
    """

    single_host: bool
    """The store lives on one machine (SQLite): ``/proc`` can judge a legacy runner."""
    closed: bool
    fence_check: Callable[[], None] | None
    """Called before each write: raises once this worker's lease is lost."""

    @property
    def location(self) -> str:
        """Where the store is, as a person named it."""
        ...

    def transaction(self) -> AbstractContextManager[StoreConnection]:
        """A committed write transaction."""
        ...

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read query."""
        ...

    def note_clock(self, db_now: float, sent: float, received: float) -> None:
        """Note the database's clock as read between ``sent`` and ``received``."""
        ...

    def interrupt(self) -> None:
        """Make a transaction stuck on a dead connection let go."""
        ...

    def fence_sessions(self, reason: str) -> list[str]:
        """Stop every write to the sessions this process holds (its lease lapsed); returns them."""
        ...


_log = logging.getLogger("zuno.durability.workers")

DEFAULT_LEASE_SECONDS = 30.0
"""How long a lease lasts without a heartbeat, unless ``ZUNO_LEASE_SECONDS`` says otherwise."""

_PREFIX = "w1"


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _stat_fields(pid: int | str) -> list[bytes] | None:
    """Fields of ``/proc/<pid>/stat`` from field 3 (state) on, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # The command name may hold spaces and parentheses: split after the last ")".
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def proc_is_ours() -> bool:
    """Whether this process's ``/proc`` shows its own PID namespace.

    After ``unshare --pid`` without a fresh ``/proc`` mount, ``/proc/<pid>``
    names processes of another namespace: then ``/proc`` must not judge anyone.
    """
    fields = _read("/proc/self/stat").split(" ", 1)
    return bool(fields[0]) and fields[0] == str(os.getpid())


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    """Who a worker is: host, PID namespace and process (a pid alone is reused).

    Attributes:
        machine: ``/etc/machine-id`` ("" when unknown, and for a legacy runner).
        boot: ``/proc/sys/kernel/random/boot_id`` (a new one at every boot).
        pidns: The inode of ``/proc/self/ns/pid`` (which PID namespace ``pid`` is in).
        pid: The process id inside that namespace.
        start: The process's start time in clock ticks since boot (field 22 of its stat).
    """

    machine: str
    boot: str
    pidns: str
    pid: int
    start: str

    @property
    def id(self) -> str:
        """The text written as ``runner`` (``w1:...``; ``pid:start`` for a legacy runner)."""
        if self.legacy:
            return f"{self.pid}:{self.start}"
        return f"{_PREFIX}:{self.machine}:{self.boot}:{self.pidns}:{self.pid}:{self.start}"

    @property
    def legacy(self) -> bool:
        """A ``pid:start`` runner written before leases: it names no host."""
        return not (self.machine or self.boot or self.pidns)

    @property
    def short(self) -> str:
        """A short name for people: the pid and the first characters of the machine id."""
        return f"{self.pid}@{self.machine[:8]}" if self.machine else str(self.pid)

    @classmethod
    def parse(cls, text: str | None) -> WorkerIdentity | None:
        """The identity a ``runner`` text names, or None when it names none."""
        if not text:
            return None
        parts = text.split(":")
        try:
            if len(parts) == 6 and parts[0] == _PREFIX:
                return cls(parts[1], parts[2], parts[3], int(parts[4]), parts[5])
            if len(parts) == 2:
                return cls("", "", "", int(parts[0]), parts[1])
        except ValueError:
            return None
        return None

    def same_pid_space(self, other: WorkerIdentity) -> bool:
        """Whether ``other``'s ``/proc`` can judge this worker: same machine, boot, namespace."""
        return (
            not self.legacy
            and not other.legacy
            and self.machine == other.machine
            and self.boot == other.boot
            and self.pidns == other.pidns
        )

    def process_alive(self) -> bool:
        """Whether this worker's process runs, by this process's ``/proc`` (same pid space only).

        A zombie (killed, not yet reaped) is dead. Call it only when
        :meth:`same_pid_space` holds (or for a legacy runner on one host).
        """
        fields = _stat_fields(self.pid)
        if not fields or len(fields) <= 19:
            return False
        return fields[19].decode() == self.start and fields[0] not in (b"Z", b"X")


_current: WorkerIdentity | None = None


def this_worker() -> WorkerIdentity:
    """The identity of the current process (computed again in a forked child)."""
    global _current
    pid = os.getpid()
    if _current is None or _current.pid != pid:
        fields = _stat_fields("self")
        start = fields[19].decode() if fields and len(fields) > 19 else "?"
        machine = _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id")
        # "-" keeps an unknown value from making the identity look legacy.
        _current = WorkerIdentity(
            machine or "-",
            _read("/proc/sys/kernel/random/boot_id") or "-",
            (_pid_namespace() if proc_is_ours() else "") or f"noproc{pid}",
            pid,
            start,
        )
    return _current


def lease_seconds(value: float | None = None) -> float:
    """The lease length: ``value``, else ``$ZUNO_LEASE_SECONDS``, else 30 seconds."""
    if value is not None:
        return float(value)
    env = os.environ.get("ZUNO_LEASE_SECONDS")
    if env:
        try:
            seconds = float(env)
        except ValueError:
            _log.warning("zuno: ZUNO_LEASE_SECONDS=%r is not a number; using 30", env)
        else:
            if seconds > 0:
                return seconds
    return DEFAULT_LEASE_SECONDS


_lease_length = lease_seconds  # WorkerLease's argument of the same name hides it


class _Cursor(Protocol):
    def fetchone(self) -> Any: ...


class _Db(Protocol):
    def execute(self, sql: str, parameters: Any = ..., /) -> _Cursor: ...


def _settleable(runner: str | None, single_host: bool, lease_alive: Callable[[str], bool]) -> bool:
    identity = WorkerIdentity.parse(runner)
    if identity is None or runner is None:
        return True  # nobody is named: nobody can still be running it
    me = this_worker()
    if identity.legacy:
        # No lease was ever written for it; only one host can have run it on SQLite.
        return not (single_host and identity.process_alive())
    if identity == me:
        return False  # this very process: alive by definition
    if identity.same_pid_space(me) and proc_is_ours() and not identity.process_alive():
        return True  # the fast path on one machine: its process is gone
    return not lease_alive(runner)


_LEASE_ALIVE_SQL = "SELECT 1 FROM workers WHERE worker_id = ? AND expires_at >= zuno_now()"


def settleable_in(db: _Db, runner: str | None, *, single_host: bool) -> bool:
    """Whether another worker may settle or take a row owned by ``runner`` (inside a transaction).

    Args:
        db: A connection of the store (its ``zuno_now()`` is the clock).
        runner: The owner written on the row (``w1:...``, legacy ``pid:start``, or None).
        single_host: The store lives on one machine (SQLite): a legacy runner is
            judged by ``/proc``.
    """
    return _settleable(
        runner,
        single_host,
        lambda worker: db.execute(_LEASE_ALIVE_SQL, (worker,)).fetchone() is not None,
    )


def runner_settleable(store: LeaseStore, runner: str | None) -> bool:
    """Whether a row owned by ``runner`` may be settled or taken now (a read, no transaction).

    True when ``runner`` names nobody, when its lease has expired (or it has
    none), or when it runs in this pid space and its process is gone.
    """
    return _settleable(
        runner,
        store.single_host,
        lambda worker: bool(store.query(_LEASE_ALIVE_SQL, (worker,))),
    )


def runner_running(runner: str | None, store: LeaseStore | None = None) -> bool:
    """Whether the worker ``runner`` may still be running (for display).

    With ``store``: its lease (:func:`runner_settleable`). Without one, only
    ``/proc`` of this pid space can say; a worker elsewhere may be running.
    """
    if store is not None:
        return not runner_settleable(store, runner)
    identity = WorkerIdentity.parse(runner)
    if identity is None:
        return False
    if identity.legacy or (identity.same_pid_space(this_worker()) and proc_is_ours()):
        return identity.process_alive()
    return True


# Leases ----------------------------------------------------------------------------

_HEARTBEAT_SQL = (
    "INSERT INTO workers (worker_id, host, pid, started_at, heartbeat_at, expires_at)"
    " VALUES (?, ?, ?, zuno_now(), zuno_now(), zuno_now() + ?)"
    " ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = zuno_now(),"
    " expires_at = zuno_now() + ? RETURNING heartbeat_at"
)
_PRUNE_SQL = "DELETE FROM workers WHERE expires_at < zuno_now() - 86400"
"""Rows expired for a day: a missing row reads as expired, so nothing changes meaning."""

# Leases alive in this process, by (worker id, store location): two store objects on
# one database share the row, and only the last one to stop expires it.
_holders: dict[tuple[str, str], int] = {}
_holders_lock = threading.Lock()


class WorkerLease:
    """This worker's lease in a store, renewed every ``lease_seconds / 3`` from a daemon thread.

    Registering writes the row at once (``expires_at = zuno_now() + lease_seconds``);
    :meth:`stop` ends the heartbeat and expires the row. Usable as a context manager.
    A lease not renewed in time fences this process (see :mod:`zuno.durability.fencing`): its
    commands are killed and its sessions in ``store`` are written no more.

    Args:
        store: The store holding the ``workers`` table.
        identity: The worker (default: this process).
        lease_seconds: The lease length (default: ``$ZUNO_LEASE_SECONDS``, else 30).
    """

    def __init__(
        self,
        store: LeaseStore,
        identity: WorkerIdentity | None = None,
        lease_seconds: float | None = None,
    ) -> None:
        self.identity = identity or this_worker()
        self.lease_seconds = _lease_length(lease_seconds)
        self._store_ref: weakref.ReferenceType[LeaseStore] = weakref.ref(store)
        self._key = (self.identity.id, store.location)
        self._stop = threading.Event()
        self._stopped = False
        self._users = 1
        self._users_lock = threading.Lock()
        self._failing = False
        choose_clock(store.single_host)
        sent = fence_clock()
        with store.transaction() as db:
            db.execute(_PRUNE_SQL)
            rows = self._beat(db, store)
        self._note_clock(store, rows, sent)
        self._watchdog = Watchdog(self.lease_seconds, self._fence)
        self._watchdog.renewed(sent)
        store.fence_check = self._watchdog.check
        with _holders_lock:
            _holders[self._key] = _holders.get(self._key, 0) + 1
        self._thread = threading.Thread(
            target=self._run, name=f"zuno-lease-{self.identity.pid}", daemon=True
        )
        self._thread.start()

    @property
    def fence_holder(self) -> int:
        """This lease's key for :func:`zuno.durability.fencing.holding`: commands run inside it are
        its own.
        """
        return self._watchdog.holder

    @property
    def worker_id(self) -> str:
        """The worker id the lease is held for."""
        return self.identity.id

    def add_user(self) -> bool:
        """Count one more user (each stops once); False when the lease has already ended."""
        with self._users_lock:
            if self._stopped:
                return False
            self._users += 1
            return True

    def _beat(self, db: Any, store: LeaseStore) -> Any:
        """Renew the row; its time (read after the commit on a server, one round trip)."""
        rows = db.execute(
            _HEARTBEAT_SQL,
            (
                self.identity.id,
                socket.gethostname(),
                self.identity.pid,
                self.lease_seconds,
                self.lease_seconds,
            ),
        )
        if store.single_host:
            rows.fetchone()  # a local file: read now, so no statement outlives the commit
            return None
        return rows

    def heartbeat(self) -> None:
        """Push the lease's expiry forward now (and the fence deadline with it)."""
        store = self._store_ref()
        if store is None:
            return
        sent = fence_clock()
        with store.transaction() as db:
            rows = self._beat(db, store)
        self._note_clock(store, rows, sent)
        if self._watchdog.renewed(sent):
            _log.warning("zuno: the worker lease is renewed again; the fence is lifted")

    @staticmethod
    def _note_clock(store: LeaseStore, rows: Any, sent: float) -> None:
        """Measure the database's clock against this machine's (a server's clock may differ)."""
        if rows is None:
            return  # zuno_now() is this machine's clock
        received = fence_clock()
        try:
            row = rows.fetchone()
        except Exception:  # the commit's answer came through a replay: measure next time
            return
        if row is not None and row[0] is not None:
            now = time.time()
            store.note_clock(float(row[0]), now - (received - sent), now)

    @property
    def fenced(self) -> bool:
        """Whether the lease lapsed past its fence deadline (until it is renewed again)."""
        return self._watchdog.fenced

    def _fence(self, reason: str) -> None:
        store = self._store_ref()
        if store is None:
            return
        store.interrupt()  # a transaction stuck on a dead connection lets go
        lost = store.fence_sessions(reason)
        _log.warning("zuno: %s (sessions: %s)", reason, ", ".join(lost) or "none")

    def _run(self) -> None:
        try:
            self._beat_until_done()
        finally:
            # The store is closed or gone (or the lease was stopped): nothing holds this
            # lease any more, so its fence must not outlive it and kill the commands of
            # whatever else this process runs afterwards.
            self._watchdog.stop()

    def _beat_until_done(self) -> None:
        interval = self.lease_seconds / 3
        while not self._stop.wait(interval):
            store = self._store_ref()
            if store is None or store.closed:
                return  # the store is gone or closed: nobody needs this lease
            del store
            try:
                self.heartbeat()
            except Exception as exc:  # a busy or dropped store: try again next beat
                if (store := self._store_ref()) is None or store.closed:
                    return
                if not self._failing:  # once per outage, not at every beat
                    _log.warning("zuno: the worker lease could not be renewed: %s", exc)
                self._failing = True
            else:
                self._failing = False

    def stop(self) -> None:
        """End the heartbeat; expire the lease unless another holder in this process needs it."""
        with self._users_lock:
            self._users -= 1
            if self._users > 0 or self._stopped:
                return
            self._stopped = True
        self._stop.set()
        self._watchdog.stop()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=max(5.0, self.lease_seconds))
        with _holders_lock:
            left = _holders.get(self._key, 1) - 1
            if left > 0:
                _holders[self._key] = left
            else:
                _holders.pop(self._key, None)
        store = self._store_ref()
        if left > 0 or store is None:
            return
        try:
            with store.transaction() as db:
                db.execute(
                    "UPDATE workers SET expires_at = zuno_now() WHERE worker_id = ?",
                    (self.identity.id,),
                )
        except Exception as exc:  # a closed or unreachable store: the lease expires by itself
            _log.debug("zuno: the worker lease was left to expire: %s", exc)

    def __enter__(self) -> WorkerLease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


_shared: weakref.WeakKeyDictionary[Any, WorkerLease] = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


def shared_lease(store: LeaseStore) -> WorkerLease:
    """This process's lease in ``store``, started by the first caller and shared by the others.

    Each caller stops it once (:meth:`WorkerLease.stop`); the last stop ends it.
    A forked child gets its own.
    """
    me = this_worker()
    with _shared_lock:
        lease = _shared.get(store)
        if lease is not None and lease.identity == me and lease.add_user():
            return lease
        lease = _shared[store] = WorkerLease(store, me)
        return lease
