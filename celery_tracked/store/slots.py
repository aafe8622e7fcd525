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

from sqlalchemy import Connection, Integer, bindparam, func, select
from sqlalchemy.exc import DBAPIError

from ..core.errors import StoreError
from ..core.jobs import JobStatus
from .engines import Engines
from .models import jobs
from .statements import CONCURRENCY_KEY, HOLDERS
from .translate import reconnecting, translated

#: dialects whose key lock is a named lock of the connection (``GET_LOCK``)
_NAMED_LOCKS = ("mysql", "mariadb")

#: Is the key full for this job? (read before the rate limiter: a job that cannot claim
#: should not spend a slot; the claim itself decides)
KEY_BUSY = select(bindparam("concurrency_limit", type_=Integer) <= HOLDERS)
#: How many jobs of a key wait for a slot (the partial index on ``(concurrency_key,
#: status)``): a full key's waiting deliveries space their looks by it.
KEY_WAITING = (
    select(func.count())
    .select_from(jobs)
    .where(
        jobs.c.concurrency_key == CONCURRENCY_KEY,
        jobs.c.status.in_([JobStatus.PENDING.value, JobStatus.RETRYING.value]),
    )
)
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
                row = engines.fastpath.execute("key_busy", lambda: KEY_BUSY, params)
            else:
                row = engines.execute(KEY_BUSY, params)
        return bool(row is not None and row[0])

    @reconnecting
    def key_waiting(self, key: str) -> int:
        """How many jobs of ``key`` wait for a slot (pending, retrying)."""
        with translated("reading the concurrency key"):
            row = self.engines.execute(KEY_WAITING, {"limited_key": key})
        return int(row[0]) if row is not None else 0
