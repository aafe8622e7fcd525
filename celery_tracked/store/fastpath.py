"""The PostgreSQL fast path: the store's own Core statements, compiled once for psycopg and
sent on per-thread autocommit connections.

Claim and completion run once per job; through SQLAlchemy's general execution path they
cost about twice the client CPU of a plain driver call, which shows directly in throughput
on small machines. Nothing here is a second copy of a statement: each is compiled from the
Core statement (``statements.py``, ``transitions.py``) with the engine's own dialect, once
per process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import weakref
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..core.errors import StoreError
from ..core.printable import storable_params
from ..core.redact import first_line
from .selects import SELECT_BACKEND_PID
from .translate import Disconnected, DuplicateJob, explained

_INHERITED: list[Any] = []

logger = logging.getLogger("celery_tracked")

#: How long the answer of a statement sent without waiting may take to arrive.
_ANSWER_WAIT_S = 30.0


class _ThreadConnection:
    """One thread's connection, closed when the thread ends, but only by the process that
    opened it: a forked child (whose copies of other threads' locals are dropped at fork)
    must never end the parent's sessions."""

    __slots__ = ("__weakref__", "conn", "owned", "unread")

    def __init__(self) -> None:
        self.conn: Any = None
        #: the key of a statement sent without waiting whose answer is not read yet
        self.unread: str | None = None
        self.owned: dict[str, Any] = {}  # the finaliser's view: never references the slot
        weakref.finalize(self, _close_owned, self.owned, os.getpid())

    def set(self, conn: Any) -> None:
        self.conn = conn
        self.unread = None
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
        self._numbered_sql: dict[str, tuple[bytes, tuple[str, ...], dict[str, Any]]] = {}
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
        self._read_answer(slot)
        conn = slot.conn
        try:
            conn = self._open(slot)
            cursor = conn.execute(sql, storable_params({**fixed, **params}))
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

    def send(self, key: str, build: Callable[[], Any], params: Mapping[str, Any]) -> None:
        """Send the statement ``build()`` and return without waiting for its answer,
        which this thread reads (and drops; a failure is logged) before its next
        statement. Only for a write whose loss is harmless: it is on the wire when this
        returns, so it runs even if the process dies next.

        Raises:
            Disconnected: the connection was dead (dropped; nothing was sent).
            StoreError: the statement could not be sent.
        """
        import psycopg

        sql, positions, fixed = self._numbered(key, build)
        values = storable_params({**fixed, **params})
        slot = self._slot()
        self._read_answer(slot)
        conn = slot.conn
        try:
            conn = self._open(slot)
            pgconn = conn.pgconn
            pgconn.send_query_params(sql, [_text(values[name]) for name in positions])
            while pgconn.flush():
                _wait(pgconn.socket, write=True)
            slot.unread = key
        except (psycopg.Error, OSError) as exc:
            reason = first_line(str(exc), type(exc).__name__)
            if conn is not None:
                conn.close()
            slot.set(None)
            raise Disconnected(reason) from None

    def _open(self, slot: _ThreadConnection) -> Any:
        """The slot's connection, a new one when it has none or it was closed."""
        conn = slot.conn
        if conn is None or conn.closed:
            conn = self._connect()
            slot.set(conn)
        return conn

    def _numbered(
        self, key: str, build: Callable[[], Any]
    ) -> tuple[bytes, tuple[str, ...], dict[str, Any]]:
        """The statement with ``$1``-style parameters (libpq's own), their names in
        order, and the constant parameters' values."""
        found = self._numbered_sql.get(key)
        if found is None:
            dialect = type(self._dialect)(paramstyle="numeric_dollar")
            compiled = build().compile(dialect=dialect)
            binds = compiled.binds
            fixed = {k: v for k, v in compiled.params.items() if not binds[k].required}
            positions = tuple(compiled.positiontup or ())
            found = self._numbered_sql[key] = (str(compiled).encode(), positions, fixed)
        return found

    def settle(self) -> None:
        """Read the answer of the statement this thread sent without waiting, if any, so
        that what this thread reads next (on any connection) sees that write."""
        slot: _ThreadConnection | None = getattr(self._local, "slot", None)
        if slot is not None:
            self._read_answer(slot)

    def _read_answer(self, slot: _ThreadConnection) -> None:
        """Read the answer of the statement this thread sent without waiting, if any."""
        key, conn = slot.unread, slot.conn
        if key is None or conn is None:
            return
        slot.unread = None
        pgconn = conn.pgconn
        try:
            while True:
                pgconn.consume_input()
                if pgconn.is_busy():
                    if not _wait(pgconn.socket, write=False):
                        raise OSError(f"no answer in {_ANSWER_WAIT_S:.0f} s")
                    continue
                result = pgconn.get_result()
                if result is None:
                    return
                message = result.error_message
                if message:
                    logger.warning(
                        "celery-tracked: %s failed: %s",
                        key,
                        first_line(message.decode(errors="replace"), "error"),
                    )
        except Exception as exc:  # the connection is in an unknown state: start afresh
            logger.warning("celery-tracked: %s: connection dropped (%s)", key, exc)
            conn.close()
            slot.set(None)

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


def _text(value: Any) -> bytes | None:
    """A parameter in PostgreSQL's text format (the statement casts each one)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.isoformat().encode()
    if isinstance(value, (str, int, float)):
        return str(value).encode()
    raise TypeError(f"no text form for a parameter of type {type(value).__name__}")


def _wait(sock: int, write: bool) -> bool:
    """Wait until ``sock`` is ready; False after ``_ANSWER_WAIT_S``."""
    ready = (
        select.select([], [sock], [], _ANSWER_WAIT_S)
        if write
        else select.select([sock], [], [], _ANSWER_WAIT_S)
    )
    return any(ready)
