"""Retention cleanup: ended rows removed in bounded batches, with their history.

A batch is one transaction of three statements, built once per sweep
(``core/cleanup.py``, ``Sweep``) by :func:`statements`:

1. ``SELECT`` the next ``limit`` rows of the sweep, oldest ``finished_at`` first, from the
   index ``ix_background_jobs_status_finished_at`` (``status``, ``finished_at``, ``id``),
   after the previous batch's last row (keyset: a run never reads a row twice), ``FOR
   UPDATE SKIP LOCKED`` on PostgreSQL and MariaDB/MySQL: a concurrent cleanup skips the
   rows this one holds, and a retry or a cancel waits for it (or is skipped by it);
2. ``DELETE`` those rows while they still are of the sweep's status and age (``RETURNING``
   their ids where the database has it: SQLite has no row locks, so a concurrent cleanup
   or a ``retry`` may have changed them between the two statements);
3. ``DELETE`` the events of the rows actually removed.

So two cleanups at once never fail on each other and never count a row twice: a row is
counted by the one ``DELETE`` that removed it. A row a batch skipped (another session held
it, if only for a moment: another cleanup's scan) is not passed by the cursor: the next
batch starts just before it (``_resume_at``), and a last batch that took nothing while a
row is held looks again after a short pause; else neither run would remove it. Only
``completed``/``failed``/``cancelled`` rows are ever selected. Knows nothing of Celery.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Delete,
    Integer,
    Select,
    String,
    and_,
    any_,
    bindparam,
    delete,
    func,
    or_,
    select,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import OperationalError

from ..core.cleanup import ENDED, Boundary, Sweep
from ..core.errors import StoreError
from ..core.jobs import PURGE_START, Batch, Removed
from .engines import Engines
from .models import UTCDateTime, events, jobs
from .translate import reconnecting, translated

#: The keyset cursor of a run's first batch: before every row.
START = PURGE_START
#: Deadlocks and lock waits that time out (MariaDB 1213/1205, SQLSTATE 40001/40P01) roll
#: the batch back whole; it is tried again, after a short random pause, this many times.
_TRIES = 5
_LOCK_ERRORS = {1213, 1205, "40001", "40P01"}

AFTER_AT = bindparam("after_at", type_=UTCDateTime)
AFTER_ID = bindparam("after_id", type_=String)
LIMIT = bindparam("limit", type_=Integer)
LAST_AT = bindparam("last_at", type_=UTCDateTime)
LAST_ID = bindparam("last_id", type_=String)
IDS = bindparam("ids", expanding=True, type_=String)
#: PostgreSQL: the batch's ids as one array parameter (``= ANY(:ids)``): 5,000 separate
#: parameters cost more client CPU to render and send than the statements take to run.
ID_ARRAY = bindparam("ids", type_=postgresql.ARRAY(String))
#: The remaining rows of the sweep after the cursor, in index order.
AFTER_CURSOR = and_(
    jobs.c.finished_at >= AFTER_AT,
    or_(jobs.c.finished_at > AFTER_AT, jobs.c.id > AFTER_ID),
)


def _older_than(finished_at: Any, job_id: Any) -> Any:
    """Rows ordered before ``(finished_at, id)`` (values or bind parameters)."""
    return or_(
        jobs.c.finished_at < finished_at,
        and_(jobs.c.finished_at == finished_at, jobs.c.id < job_id),
    )


def condition(sweep: Sweep) -> Any:
    """The sweep's rows (``Sweep.admits`` in SQL)."""
    parts = [jobs.c.status == sweep.status, jobs.c.finished_at < sweep.before]
    if sweep.tasks:
        parts.append(jobs.c.task_name.in_(sweep.tasks))
    if sweep.other_than:
        parts.append(jobs.c.task_name.not_in(sweep.other_than))
    if sweep.below is not None:
        parts.append(
            or_(
                *(
                    and_(jobs.c.queue_name == b.queue, _older_than(b.finished_at, b.id))
                    for b in sweep.below
                )
            )
        )
    return and_(*parts)


@dataclass(frozen=True)
class Statements:
    """The statements of a sweep's batches."""

    select: Select[Any]
    delete_jobs: Delete
    delete_events: Delete
    #: the first row of the sweep still there after the cursor, before the page's last row
    #: (a plain read, after the page's delete: a row the page skipped, locked by another)
    skipped: Select[Any]


def _one_of(column: Any, array: bool) -> Any:
    return column == any_(ID_ARRAY) if array else column.in_(IDS)


@functools.lru_cache(maxsize=32)
def prepared_statements(sweep: Sweep, array: bool) -> Statements:
    """:func:`statements`, built once per sweep (a cleanup runs many batches of one)."""
    return statements(sweep, array)


def statements(sweep: Sweep, array: bool = False) -> Statements:
    """The statements of ``sweep``'s batches (``array``: the ids as one array parameter,
    PostgreSQL)."""
    chosen = (
        select(
            jobs.c.id,
            jobs.c.job_type,
            jobs.c.idempotency_key,
            jobs.c.created_at,
            jobs.c.finished_at,
        )
        .where(condition(sweep), AFTER_CURSOR)
        .order_by(jobs.c.finished_at, jobs.c.id)
        .limit(LIMIT)
        .with_for_update(skip_locked=True)
    )
    gone = delete(jobs).where(
        _one_of(jobs.c.id, array),
        jobs.c.status == sweep.status,
        jobs.c.finished_at < sweep.before,
    )
    skipped = (
        select(jobs.c.finished_at, jobs.c.id)
        .where(condition(sweep), AFTER_CURSOR, _older_than(LAST_AT, LAST_ID))
        .order_by(jobs.c.finished_at, jobs.c.id)
        .limit(1)
    )
    events_gone = delete(events).where(_one_of(events.c.job_id, array))
    return Statements(chosen, gone, events_gone, skipped)


def count(sweep: Sweep) -> Select[Any]:
    """How many rows ``sweep`` would remove now (a dry run)."""
    return select(func.count()).select_from(jobs).where(condition(sweep))


def boundaries(keep: int) -> Select[Any]:
    """Per queue and ended status holding at least ``keep`` rows: its ``keep``-th newest
    row (``status, queue_name, finished_at, id``); the rows ordered before it are the
    ones beyond its newest ``keep``."""
    rank = (
        func.row_number()
        .over(
            partition_by=(jobs.c.queue_name, jobs.c.status),
            order_by=(jobs.c.finished_at.desc(), jobs.c.id.desc()),
        )
        .label("nth")
    )
    ranked = (
        select(jobs.c.status, jobs.c.queue_name, jobs.c.finished_at, jobs.c.id, rank)
        .where(jobs.c.status.in_(ENDED), jobs.c.finished_at.is_not(None))
        .subquery()
    )
    return select(ranked.c.status, ranked.c.queue_name, ranked.c.finished_at, ranked.c.id).where(
        ranked.c.nth == keep
    )


class Cleanup:
    """The cleanup statements of :class:`~celery_tracked.store.JobStore`."""

    engines: Engines

    def purge_batch(self, sweep: Sweep, cursor: tuple[datetime, str], limit: int) -> Batch:
        """Remove the next at most ``limit`` rows of ``sweep`` after ``cursor``, with their
        events, in one transaction (retried whole after a deadlock). A batch that finds
        no row it can take while another session holds one is tried again after a short
        pause (a moment's lock, such as another cleanup's scan), then ends the sweep.

        Raises:
            StoreError: the database failed (this batch removed nothing).
        """
        prepared = prepared_statements(sweep, self.engines.is_postgres)
        end = (sweep.before, "")
        for tried in range(_TRIES):
            last = tried == _TRIES - 1
            try:
                with translated("removing old jobs"):
                    return self._batch(prepared, cursor, limit, None if last else end)
            except _LockConflict:
                if last:
                    message = f"removing old jobs failed: deadlocked {_TRIES} times"
                    raise StoreError(message) from None
                time.sleep(random.uniform(0, 0.05 * (tried + 1)))
            except _Held:
                time.sleep(0.02 * (tried + 1))
        raise AssertionError("unreachable")

    def _batch(
        self,
        prepared: Statements,
        cursor: tuple[datetime, str],
        limit: int,
        end: tuple[datetime, str] | None,
    ) -> Batch:
        params = {"after_at": cursor[0], "after_id": cursor[1], "limit": limit}
        with _transaction(self.engines) as conn:
            rows = conn.execute(prepared.select, params).all()
            if not rows:
                if end is not None and _held(conn, prepared, params, end):
                    raise _Held()
                return Batch((), 0, None)
            ids = [str(r.id) for r in rows]
            gone_statement: Any = prepared.delete_jobs
            if conn.dialect.delete_returning:
                gone_statement = prepared.delete_jobs.returning(jobs.c.id)
            result = conn.execute(gone_statement, {"ids": ids})
            gone = {str(r[0]) for r in result} if result.returns_rows else set(ids)
            removed = tuple(
                Removed(str(r.id), str(r.job_type), r.idempotency_key, r.created_at)
                for r in rows
                if str(r.id) in gone
            )
            n_events = 0
            if removed:
                n_events = conn.execute(prepared.delete_events, {"ids": sorted(gone)}).rowcount
            after = _resume_at(conn, prepared, params, rows) if removed else None
        last = rows[-1]
        return Batch(removed, n_events, after or (last.finished_at, str(last.id)))

    @reconnecting
    def purge_count(self, sweep: Sweep) -> int:
        """How many rows ``sweep`` would remove now."""
        with translated("counting old jobs"), self.engines.transaction() as conn:
            return int(conn.execute(count(sweep)).scalar_one())

    @reconnecting
    def keep_boundaries(self, keep: int) -> list[tuple[str, Boundary]]:
        """``(status, Boundary)`` of every queue holding at least ``keep`` rows of an
        ended status: its rows ordered before the boundary are beyond its ``keep`` newest."""
        with translated("finding the newest jobs to keep"), self.engines.transaction() as conn:
            rows = conn.execute(boundaries(keep)).all()
        return [(str(s), Boundary(str(q), f, str(i))) for s, q, f, i in rows]


def _resume_at(
    conn: Connection, prepared: Statements, params: dict[str, Any], rows: Sequence[Any]
) -> tuple[datetime, str] | None:
    """Where the next batch starts when this one skipped a row (``SKIP LOCKED``: another
    session held it, maybe only for a moment, as another cleanup's scan does): just before
    that row, so that the run looks at it again instead of passing it; None when nothing
    was skipped. A row held for the whole run is skipped by every batch and left (the next
    run removes it): each batch still removes rows after it, and a batch that finds none
    ends the sweep."""
    last = rows[-1]
    found = _first_before(conn, prepared, params, (last.finished_at, str(last.id)))
    if found is None:
        return None
    first = (found.finished_at, str(found.id))
    taken = [(r.finished_at, str(r.id)) for r in rows if (r.finished_at, str(r.id)) < first]
    return taken[-1] if taken else (params["after_at"], params["after_id"])


def _first_before(
    conn: Connection, prepared: Statements, params: dict[str, Any], bound: tuple[datetime, str]
) -> Any:
    """The first row of the sweep after the cursor and before ``bound`` that is still
    there, read without a lock (so: held by another session); None on SQLite (no row
    locks, nothing is skipped)."""
    if conn.dialect.name == "sqlite":
        return None
    found = {**params, "last_at": bound[0], "last_id": bound[1]}
    return conn.execute(prepared.skipped, found).first()


def _held(
    conn: Connection, prepared: Statements, params: dict[str, Any], end: tuple[datetime, str]
) -> bool:
    return _first_before(conn, prepared, params, end) is not None


class _Held(Exception):
    """Internal: a batch took no row while another session held one of the sweep's."""


class _LockConflict(Exception):
    """Internal: a batch lost a deadlock or a lock wait; it rolled back whole."""


@contextmanager
def _transaction(engines: Engines) -> Iterator[Connection]:
    """A read-committed transaction (no gap locks on MariaDB), deadlocks told apart."""
    with engines.get().engine.connect() as conn:
        if conn.dialect.name != "sqlite":
            conn = conn.execution_options(isolation_level="READ COMMITTED")
        try:
            with conn.begin():
                yield conn
        except OperationalError as exc:
            orig: Any = exc.orig
            codes = {getattr(orig, "sqlstate", None), *(getattr(orig, "args", ())[:1])}
            if codes & _LOCK_ERRORS:
                raise _LockConflict() from None
            raise
