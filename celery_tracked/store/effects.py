"""Writes that share a transaction with the application's own (``exactly-once.md``).

- A job created in the caller's transaction (``TrackedTask.enqueue_in``):
  :func:`connection_of` finds the caller's connection to the tracking database,
  :func:`insert_in` writes the row and its ``enqueued`` event there (the unique
  ``(job_type, idempotency_key, key_round)`` constraint decides between concurrent
  transactions, without ever aborting the caller's: a savepoint on PostgreSQL, the key's
  named lock on MariaDB/MySQL, ``locks``), and :func:`after_commit` runs the
  publish once that transaction committed, never after a rollback.
- A run's completion committed with the body's own writes (``TrackedTask.transaction``):
  :func:`begin` opens the body's transaction, :class:`HeldCompletion` writes the fenced
  completion in it and commits, or rolls it all back.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, SessionTransaction

from ..core.errors import (
    Disconnected,
    NotInTrackingDatabase,
    Refused,
    StoreError,
    TransactionFailed,
)
from ..core.fences import Completion
from ..core.jobs import Claim, Job, JobStatus
from . import inserts, locks, selects
from . import statements as sql
from . import transitions as moves
from .apply import Apply, insert_rows
from .engines import Engines
from .models import jobs
from .translate import translated

logger = logging.getLogger("celery_tracked")

#: How long a publish after a ``Connection``'s commit waits for the row to be visible (a
#: ``Connection`` tells its commit just before it happens): then the relay's.
VISIBLE_WAIT_S = 10.0
#: The first and the longest pause between two reads of that row.
POLL_FIRST_S, POLL_MAX_S = 0.01, 0.2
Action = Callable[[], None]
#: The publishes waiting for the commit of a caller's session or connection.
_PENDING: weakref.WeakKeyDictionary[Any, list[tuple[str, Action]]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _key(url: URL) -> tuple[str, str]:
    database = url.database or ""
    if url.get_backend_name() == "sqlite" and database not in ("", ":memory:"):
        database = os.path.abspath(database)
    return url.get_backend_name(), database


def connection_of(target: object, engines: Engines) -> Connection:
    """The caller's connection of ``target`` (a ``Session`` or a ``Connection``), in its
    transaction (begun if none is).

    Raises:
        TypeError: ``target`` is neither.
        NotInTrackingDatabase: it is connected to another database (its kind or its name
            differs from the tracking database's; the host is not compared).
    """
    if isinstance(target, Session):
        conn = target.connection()
    elif isinstance(target, Connection):
        conn = target
    else:
        raise TypeError(
            f"enqueue_in needs a SQLAlchemy Session or Connection, not {type(target).__name__}"
        )
    if _key(conn.engine.url) != _key(make_url(engines.url)):
        raise NotInTrackingDatabase(
            "enqueue_in: this connection is not to the tracking database "
            f"({conn.engine.url.get_backend_name()} database {conn.engine.url.database!r}); "
            "the job's row can only share a transaction of tracked_database_url"
        )
    return conn


def insert_in(conn: Connection, row: dict[str, object], engines: Engines) -> Job | None:
    """Insert the pending job ``row`` and its ``enqueued`` event in ``conn``'s transaction;
    None when inserted, else the job holding its id or key (on PostgreSQL the insert waits
    for a concurrent transaction inserting the same key, then sees its row; on MariaDB and
    MySQL the key's named lock does: ``locks``).

    Raises:
        StoreError: the database failed, or the colliding job is gone meanwhile.
    """
    params = {**inserts.NEW_JOB_DEFAULTS, **row, "now": row["created_at"]}
    innodb = conn.dialect.name not in ("postgresql", "sqlite")
    with translated("inserting the job row"):
        if innodb:
            locks.hold(conn, row)
            found = _committed(row, engines)  # never a locking read in the caller's
            if found is not None:
                return found
        insert = inserts.job_insert_if_absent(conn.dialect.name)
        if not innodb:
            inserted = _insert_returning(conn, insert, params)
        else:
            inserted = _insert_ignore(conn, insert, params) == 1
        if inserted:
            event_row = sql.event_insert(jobs, "enqueued", JobStatus.PENDING)
            conn.execute(event_row, {"job_id": row["id"], "now": row["created_at"]})
            return None
        found = _holding(conn, row)  # this transaction's own row, or one in its snapshot
        if found is None and conn.dialect.name != "sqlite":  # committed after its snapshot
            found = _committed(row, engines)
    if found is None:
        raise StoreError("inserting the job row failed: it collided with a job now gone")
    return found


def _holding(conn: Connection, row: dict[str, object]) -> Job | None:
    found = None
    if row["idempotency_key"] is not None:
        key = {"job_type": row["job_type"], "idempotency_key": row["idempotency_key"]}
        found = conn.execute(selects.SELECT_BY_KEY, key).mappings().first()
    if found is None:
        found = conn.execute(selects.SELECT_JOB, {"job_id": row["id"]}).mappings().first()
    return None if found is None else Job.from_row(found)


def _committed(row: dict[str, object], engines: Engines) -> Job | None:
    """The job holding ``row``'s key or id, as committed now (a connection of its own)."""
    with engines.get().engine.connect() as other:
        other = other.execution_options(isolation_level="READ COMMITTED")
        with other.begin():
            return _holding(other, row)


def _insert_returning(conn: Connection, insert: Any, params: dict[str, object]) -> bool:
    """PostgreSQL and SQLite: inserted? On PostgreSQL in a savepoint: under ``REPEATABLE
    READ`` or ``SERIALIZABLE`` a key committed after the caller's snapshot is a
    serialization failure, which would abort the caller's transaction; rolled back to the
    savepoint, the transaction goes on (the job is then read as committed)."""
    statement = insert.returning(jobs.c.id)
    if conn.dialect.name != "postgresql":
        return conn.execute(statement, params).first() is not None
    savepoint = conn.begin_nested()
    try:
        inserted = conn.execute(statement, params).first() is not None
    except OperationalError as exc:
        savepoint.rollback()
        if getattr(exc.orig, "sqlstate", None) == "40001":
            return False
        raise
    savepoint.commit()
    return inserted


def _insert_ignore(conn: Connection, insert: Any, params: dict[str, object]) -> int:
    """MariaDB/MySQL: the insert's row count. A deadlock (the caller's whole transaction
    rolled back by InnoDB) invalidates the caller's connection, so that its ``commit()``
    raises instead of committing nothing in silence."""
    try:
        return int(conn.execute(insert, params).rowcount)
    except OperationalError as exc:
        if getattr(exc.orig, "args", (None,))[:1] != (1213,):
            raise
        conn.invalidate()
        raise StoreError(
            "the database rolled your whole transaction back (a deadlock with another "
            "session that holds this key): nothing of it is committed, its commit raises"
        ) from None


def after_commit(
    target: Session | Connection, job_id: str, action: Action, engines: Engines
) -> None:
    """Run ``action`` once ``target``'s transaction committed; drop it on a rollback.

    A ``Session`` says so after its commit. A ``Connection`` only tells its commit just
    before the database commits: ``action`` then runs in a thread once the row
    ``job_id`` is visible (at most :data:`VISIBLE_WAIT_S`; a commit that failed leaves no
    row, and nothing runs). That thread is not a daemon: a process exiting right after the
    commit publishes before it exits."""
    with _LOCK:
        pending = _PENDING.get(target)
        if pending is None:
            pending = _PENDING[target] = []
            if isinstance(target, Session):
                event.listen(target, "after_commit", _session_committed)
                # after its ``after_commit``; also when it is closed without a commit
                event.listen(target, "after_transaction_end", _session_ended)
            else:
                event.listen(target, "commit", lambda conn: _connection_committing(conn, engines))
                event.listen(target, "rollback", _rolled_back)
        pending.append((job_id, action))


def _taken(target: object) -> list[tuple[str, Action]]:
    with _LOCK:
        pending = _PENDING.get(target)
        if not pending:
            return []
        taken = list(pending)
        pending.clear()
        return taken


def _rolled_back(target: object) -> None:
    _taken(target)


def _session_ended(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:
        _taken(session)


def _session_committed(session: Session) -> None:
    for _, action in _taken(session):
        action()


def _connection_committing(conn: Connection, engines: Engines) -> None:
    taken = _taken(conn)
    if taken:  # not a daemon: a process exiting right after the commit publishes first
        thread = threading.Thread(
            target=_when_visible, args=(taken, engines), name="celery-tracked-publish"
        )
        thread.daemon = False
        thread.start()


def _when_visible(taken: list[tuple[str, Action]], engines: Engines) -> None:
    deadline = time.monotonic() + VISIBLE_WAIT_S
    pause = POLL_FIRST_S
    while taken and time.monotonic() < deadline:
        waiting = []
        for job_id, action in taken:
            try:
                visible = engines.execute(selects.SELECT_ATTEMPTS_STATUS, {"job_id": job_id})
            except Exception as exc:  # the relay publishes it
                logger.warning("job %s: could not read its row to publish it: %s", job_id, exc)
                visible = None
            if visible is not None:
                action()
            else:
                waiting.append((job_id, action))
        taken = waiting
        if taken:
            time.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)


def begin(engines: Engines) -> Connection:
    """A connection to the tracking database in a new transaction (the body's own)."""
    engines = engines.get()
    if engines.fastpath is not None:
        engines.fastpath.settle()
    with translated("opening a transaction"):
        conn = engines.engine.connect()
        if engines.is_postgres:
            conn = conn.execution_options(isolation_level="READ COMMITTED")
        conn.begin()
        if conn.dialect.name == "sqlite":  # pysqlite defers it: a savepoint would commit
            conn.exec_driver_sql("BEGIN")
    return conn


class HeldCompletion:
    """The body's transaction, parked until its run's completion (``HeldTransaction``)."""

    def __init__(self, engines: Engines, conn: Connection) -> None:
        self.engines = engines
        self.conn = conn
        #: how many ``transaction()`` blocks are open on it now (nested: savepoints)
        self.depth = 0
        self.locks_writer = conn.dialect.name == "sqlite"

    def complete(self, claim: Claim, done: Completion) -> bool:
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "now": done.now}
        params.update(result_json=done.result_json, duration_ms=done.duration_ms)
        try:
            with translated("completion of the job"):
                found = Apply.apply_in(self.conn, moves.COMPLETE, params, self.engines.is_postgres)
                if found is None:  # the lease was lost: nothing the body wrote remains
                    self.abandon()
                    return False
                insert_rows(self.conn, done.rows)
        except Refused:
            self.abandon()
            raise
        except StoreError as exc:  # the server ended it, or the body's own error aborted it
            self.abandon()
            raise TransactionFailed(f"the body's transaction failed: {exc}") from None
        except BaseException:
            self.abandon()
            raise
        try:
            with translated("committing the job's transaction"):
                self.conn.commit()
        except StoreError as exc:
            self.abandon()
            with translated("reading the job"):  # did the commit happen before it failed?
                row = self.engines.execute(selects.SELECT_ATTEMPTS_STATUS, {"job_id": claim.job_id})
            if row is not None and tuple(row) == (claim.attempt, JobStatus.COMPLETED.value):
                return True
            if isinstance(exc, (Disconnected, Refused)):  # the database went away; a refusal
                raise
            raise TransactionFailed(f"the body's transaction failed: {exc}") from None
        self.conn.close()
        return True

    def abandon(self) -> None:
        try:
            self.conn.rollback()
        except Exception as exc:  # a dead connection: the server rolled it back
            logger.warning("could not roll back the body's transaction: %s", exc)
        finally:
            self.conn.close()
