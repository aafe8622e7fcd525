"""The store's locks, per dialect: a concurrency key's lock for a keyed claim
(:func:`key_locked`), and the named lock of an idempotency key an ``enqueue_in`` holds on
MariaDB/MySQL (:func:`hold`).

A concurrency key's lock (``claims.py`` says why a keyed claim needs one):

- PostgreSQL: ``pg_advisory_xact_lock(hashtext(key))`` in the claim's transaction, before
  the claim statement takes its snapshot (transaction-scoped: PgBouncer-safe);
- MariaDB/MySQL: ``GET_LOCK`` taken before the transaction, released after its commit
  (InnoDB's snapshot is taken by the claim's first read, after the lock);
- SQLite: no lock statement: the claim is one ``UPDATE``, which takes the database's write
  lock before it reads, so writers are serialized.

An idempotency key's lock: MariaDB/MySQL: one ``enqueue_in`` at a time per key, so that
a conflict never aborts the caller's transaction (``docs/exactly-once.md``).

InnoDB decides a duplicate key by locking the existing index record, shared. When the
transaction that inserted the key rolls back, every insert waiting on it holds that shared
lock and then wants the exclusive one: two waiters deadlock, and InnoDB rolls the victim's
**whole** transaction back (the caller's own writes with it, its ``commit()`` then commits
nothing). So on these databases a caller's transaction never waits on another's
uncommitted key: it first takes a named lock of the key (``GET_LOCK``, held by its session,
outside any transaction, released when its transaction commits or rolls back), then reads
the key on a separate connection (the latest committed row, whatever the caller's snapshot),
and inserts only when no job holds it. At most one transaction at a time then waits on a
given key's uncommitted row, and one waiter cannot deadlock on it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from sqlalchemy import Connection, event, func, select, text
from sqlalchemy.exc import DBAPIError, OperationalError

from ..core.errors import StoreError
from .engines import Engines
from .statements import CONCURRENCY_KEY

logger = logging.getLogger("celery_tracked")

#: How long an ``enqueue_in`` waits for the transaction holding its key (InnoDB's default
#: ``innodb_lock_wait_timeout``); then it raises, and the caller's transaction goes on.
WAIT_S = 50
_PREFIX = "celery_tracked:"
#: The named locks each caller's connection holds, released at its transaction's end.
_HELD: weakref.WeakKeyDictionary[Connection, set[str]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()

#: dialects whose key lock is a named lock of the connection (``GET_LOCK``)
_NAMED_LOCKS = ("mysql", "mariadb")
#: The key's lock for the rest of the transaction (PostgreSQL; PgBouncer-safe).
KEY_LOCK_PG = select(func.pg_advisory_xact_lock(func.hashtext(CONCURRENCY_KEY)))
#: MariaDB/MySQL: a named lock of the connection, taken before the transaction and
#: released after its commit (names are at most 64 characters: a digest of the key).
_LOCK_NAME = func.concat("celery_tracked:", func.md5(CONCURRENCY_KEY))
KEY_LOCK_MYSQL = select(func.get_lock(_LOCK_NAME, 10))
KEY_UNLOCK_MYSQL = select(func.release_lock(_LOCK_NAME))


@contextmanager
def key_locked(engines: Engines, key: str) -> Iterator[Connection]:
    """A transaction holding the lock of concurrency key ``key``.

    Raises:
        StoreError: MariaDB did not grant the lock within 10 s.
    """
    params = {"limited_key": key}
    with engines.get().engine.connect() as conn:
        named = conn.dialect.name in _NAMED_LOCKS
        if engines.is_postgres:
            conn = conn.execution_options(isolation_level="READ COMMITTED")
        if named:
            granted = conn.execute(KEY_LOCK_MYSQL, params).scalar()
            conn.commit()
            if granted != 1:
                raise StoreError("the lock of the job's concurrency key was not granted in 10 s")
        try:
            with conn.begin():
                if engines.is_postgres:
                    conn.execute(KEY_LOCK_PG, params)
                yield conn
        finally:
            if named:
                with suppress(DBAPIError):  # a dead connection has released it already
                    conn.execute(KEY_UNLOCK_MYSQL, params)
                    conn.commit()


# -- an idempotency key's lock (enqueue_in, MariaDB/MySQL) ------------------------------


def lock_name(row: dict[str, object]) -> str:
    """The key's lock (or the job id's, without a key): hexadecimal, at most 64 characters."""
    key = row["idempotency_key"]
    what = f"{row['job_type']}\0{key}" if key is not None else f"id\0{row['id']}"
    return _PREFIX + hashlib.sha256(what.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def hold(conn: Connection, row: dict[str, object]) -> None:
    """Take ``row``'s key lock on ``conn`` until its transaction ends (kept if held).

    Raises:
        StoreError: another transaction held the key for :data:`WAIT_S` seconds, or two
            transactions wait for each other's keys (nothing was written: the caller's
            transaction is intact; MariaDB ends only this statement, verified).
    """
    name = lock_name(row)
    with _LOCK:
        held = _HELD.get(conn)
        if held is None:
            held = _HELD[conn] = set()
            event.listen(conn, "commit", _release)
            event.listen(conn, "rollback", _release)
        if name in held:
            return
    try:
        got = conn.execute(text("SELECT GET_LOCK(:name, :wait)"), {"name": name, "wait": WAIT_S})
    except OperationalError as exc:  # a wait cycle of named locks: this statement only
        if getattr(exc.orig, "args", (None,))[:1] != (1213,):
            raise
        raise StoreError(
            "another transaction holds this key and waits for a key this one holds "
            "(enqueue_in of several keys in another order): nothing was written, your "
            "transaction goes on"
        ) from None
    if got.scalar() != 1:
        raise StoreError(
            f"another transaction held this key for {WAIT_S} s (it has not committed or "
            "rolled back): nothing was written"
        )
    with _LOCK:
        held.add(name)


def _release(conn: Connection) -> None:
    """The transaction ends (told just before the database ends it): free its key locks.
    A transaction waiting for one then waits, alone, on the row this one inserted."""
    with _LOCK:
        held = _HELD.get(conn)
        names = sorted(held or ())
        if held:
            held.clear()
    if not names:
        return
    try:
        cursor = conn.connection.cursor()  # DBAPI: not an execution of the ending transaction
        try:
            for name in names:  # a hexadecimal name, no quoting needed
                cursor.execute(f"DO RELEASE_LOCK('{name}')")
        finally:
            cursor.close()
    except Exception as exc:  # a dead connection: its session's locks are gone with it
        logger.debug("could not release the key locks of an enqueue_in: %s", exc)
