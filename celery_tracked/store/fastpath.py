"""The PostgreSQL fast path: the store's own Core statements, compiled once for psycopg and
sent on per-thread autocommit connections.

Claim and completion run once per job; through SQLAlchemy's general execution path they
cost about twice the client CPU of a plain driver call, which shows directly in throughput
on small machines. Nothing here is a second copy of a statement: each is compiled from the
Core statement in ``statements.py`` with the engine's own dialect, once per process.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ..core.errors import StoreError
from ..core.redact import first_line
from .selects import SELECT_BACKEND_PID
from .translate import Disconnected, DuplicateJob, explained

_INHERITED: list[Any] = []


class _ThreadConnection:
    """One thread's connection, closed when the thread ends, but only by the process that
    opened it: a forked child (whose copies of other threads' locals are dropped at fork)
    must never end the parent's sessions."""

    __slots__ = ("__weakref__", "conn", "owned")

    def __init__(self) -> None:
        self.conn: Any = None
        self.owned: dict[str, Any] = {}  # the finaliser's view: never references the slot
        weakref.finalize(self, _close_owned, self.owned, os.getpid())

    def set(self, conn: Any) -> None:
        self.conn = conn
        if conn is None:
            self.owned.pop("conn", None)
        else:
            self.owned["conn"] = conn


def _close_owned(owned: dict[str, Any], pid: int) -> None:
    if os.getpid() != pid:
        return
    for conn in list(owned.values()):
        with contextlib.suppress(Exception):
            conn.close()
    owned.clear()


def prepare_only_if_direct(conn: Any, dialect: Any) -> bool:
    """Turn psycopg's server-side prepared statements off on ``conn`` unless it is a
    session of its own on one server process; True if it is (prepares stay as set).

    psycopg names a connection's prepared statements ``_pg3_0``, ``_pg3_1``, ... Behind a
    transaction pooler (PgBouncer, pgcat, Odyssey, Supavisor) each transaction may run on
    another server connection, where another client's ``_pg3_0`` may be a different
    statement: with as many parameters, it would run. Direct, the server process that
    answers is the one that announced itself when the session started (its
    ``BackendKeyData``, ``conn.info.backend_pid``); a pooler announces an id of its own,
    so the two differ. One round trip per new connection."""
    from psycopg.pq import TransactionStatus

    if conn.prepare_threshold is None:
        return False
    with conn.cursor() as cursor:
        cursor.execute(str(SELECT_BACKEND_PID.compile(dialect=dialect)))
        row = cursor.fetchone()
    if conn.info.transaction_status != TransactionStatus.IDLE:
        conn.rollback()  # a connection not in autocommit opened a transaction for it
    if row is not None and row[0] == conn.info.backend_pid:
        return True
    conn.prepare_threshold = None
    return False


class FastPath:
    """One autocommit psycopg connection per thread; a connection that fails is dropped
    and the next call opens a new one. ``params`` are psycopg's connect arguments
    (``prepare_threshold=None``: known to be behind a transaction pooler); otherwise each
    new connection prepares statements only if it is direct (``prepare_only_if_direct``)."""

    def __init__(self, params: Mapping[str, Any], dialect: Any) -> None:
        self._params = dict(params)
        self._dialect = dialect
        self._compiled: dict[str, tuple[str, dict[str, Any]]] = {}
        self._local = threading.local()
        self._opened: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()

    def _slot(self) -> _ThreadConnection:
        slot: _ThreadConnection | None = getattr(self._local, "slot", None)
        if slot is None:
            slot = self._local.slot = _ThreadConnection()
        return slot

    def _sql(self, key: str, build: Callable[[], Any]) -> tuple[str, dict[str, Any]]:
        """The statement compiled for psycopg, and the values of its constant parameters."""
        found = self._compiled.get(key)
        if found is None:
            compiled = build().compile(dialect=self._dialect)
            binds = compiled.binds
            fixed = {k: v for k, v in compiled.params.items() if not binds[k].required}
            found = self._compiled[key] = (str(compiled), fixed)
        return found

    def execute(
        self, key: str, build: Callable[[], Any], params: Mapping[str, Any]
    ) -> tuple[Any, ...] | None:
        """Run the statement ``build()`` (compiled once under ``key``); the first row or None.

        Raises:
            DuplicateJob: a unique constraint refused the row.
            Disconnected: the connection was dead (dropped; the next call reconnects).
            StoreError: any other database error.
        """
        import psycopg

        sql, fixed = self._sql(key, build)
        slot = self._slot()
        conn = slot.conn
        try:
            if conn is None or conn.closed:
                conn = self._connect()
                slot.set(conn)
            cursor = conn.execute(sql, {**fixed, **params})
            row: tuple[Any, ...] | None = None if cursor.description is None else cursor.fetchone()
            return row
        except psycopg.IntegrityError:
            raise DuplicateJob() from None
        except psycopg.Error as exc:
            reason = first_line(str(exc), type(exc).__name__)
            if conn is not None and (conn.broken or isinstance(exc, psycopg.OperationalError)):
                conn.close()
                slot.set(None)
                raise Disconnected(reason) from None
            raise StoreError(explained(exc, reason)) from None

    def _connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(**self._params, autocommit=True)
        prepare_only_if_direct(conn, self._dialect)
        with self._lock:
            self._opened.add(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            opened, self._opened = list(self._opened), weakref.WeakSet()
        for conn in opened:
            conn.close()
        self._local = threading.local()

    def abandon(self) -> None:
        """After a fork: keep the parent's connections referenced, never closed here
        (finalising them in the child would end the parent's sessions)."""
        _INHERITED.extend(self._opened)
        _INHERITED.append(self._local)
        self._opened = weakref.WeakSet()
