"""Concurrency keys: a keyed claim under the key's lock, and whether a key is full.

A job with a concurrency key may be claimed (or taken over) only while fewer than its
task's limit of jobs with that key are ``processing`` under a live lease (``KEY_FREE`` in
``statements.py``, judged on the database's clock). The slot is the job's own fenced
lease: when a worker dies, its slot frees itself once the lease lapses. Two claims of one
key must not both see a free slot, so a keyed claim runs under the key's lock:

- PostgreSQL: ``pg_advisory_xact_lock(hashtext(key))`` in the claim's transaction, before
  the claim statement takes its snapshot (transaction-scoped: PgBouncer-safe);
- MariaDB/MySQL: ``GET_LOCK`` taken before the transaction, released after its commit
  (InnoDB's snapshot is taken by the claim's first read, after the lock);
- SQLite: no lock statement: the claim is one ``UPDATE``, which takes the database's write
  lock before it reads, so writers are serialized.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from ..errors import StoreError
from . import statements as sql
from .engines import Engines
from .translate import reconnecting, translated

#: dialects whose key lock is a named lock of the connection (``GET_LOCK``)
_NAMED_LOCKS = ("mysql", "mariadb")


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
            granted = conn.execute(sql.KEY_LOCK_MYSQL, params).scalar()
            conn.commit()
            if granted != 1:
                raise StoreError(f"the lock of concurrency key {key!r} was not granted in 10 s")
        try:
            with conn.begin():
                if engines.is_postgres:
                    conn.execute(sql.KEY_LOCK_PG, params)
                yield conn
        finally:
            if named:
                with suppress(DBAPIError):  # a dead connection has released it already
                    conn.execute(sql.KEY_UNLOCK_MYSQL, params)
                    conn.commit()


class Slots:
    """The concurrency-key reads of :class:`~celery_tracked.store.JobStore`."""

    engines: Engines

    @reconnecting
    def key_busy(self, job_id: str, key: str, limit: int) -> bool:
        """True when ``limit`` other jobs with ``key`` hold a live lease (a hint read
        before the rate limiter: only the keyed claim decides)."""
        params = {"job_id": job_id, "limited_key": key, "concurrency_limit": limit}
        engines = self.engines.get()
        with translated("reading the concurrency key"):
            if engines.is_postgres and engines.fastpath is not None:
                row = engines.fastpath.execute("key_busy", lambda: sql.KEY_BUSY, params)
            else:
                row = engines.execute(sql.KEY_BUSY, params)
        return bool(row is not None and row[0])
