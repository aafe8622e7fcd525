"""Finding jobs and the health of the queues: the statements behind ``Tracker.jobs``,
the bulk actions and ``Tracker.stats``.

``find_statement`` is the one listing of jobs: the filters of a
:class:`~celery_tracked.finder.JobFilter` (each an indexed equality or range), newest
first by ``(created_at, id)``, after a keyset position. The position is written
``created_at <= :c AND (created_at < :c OR id < :i)``: the first half is a plain range
every database serves from an index on ``created_at`` (or one ending with it), the second
breaks ties; a row-value comparison would read the same but MariaDB does not use an index
for it. The indexes that answer it at 1M rows are in ``models.py``; their ``EXPLAIN``
is in docs/operations.md.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Float, Select, and_, func, or_, select

from ..core.finder import JobFilter, Position
from ..core.jobs import Job, JobStatus
from .clock import db_time
from .engines import Engines
from .models import UTCDateTime, jobs
from .statements import param
from .translate import reconnecting, translated

AFTER_AT = param("after_created_at", UTCDateTime)
AFTER_ID = param("after_id", jobs.c.id.type)
SINCE_S = param("since_s", Float)

_TEXT_COLUMNS = {
    "queue": jobs.c.queue_name,
    "job_type": jobs.c.job_type,
    "task_name": jobs.c.task_name,
    "correlation_id": jobs.c.correlation_id,
    "owner_id": jobs.c.owner_id,
    "error_type": jobs.c.error_type,
}


def conditions(filt: JobFilter) -> list[ColumnElement[bool]]:
    """The WHERE clauses of ``filt`` (values as bound parameters)."""
    where: list[ColumnElement[bool]] = []
    if len(filt.statuses) == 1:
        where.append(jobs.c.status == filt.statuses[0].value)
    elif filt.statuses:
        where.append(jobs.c.status.in_([s.value for s in filt.statuses]))
    for name, column in _TEXT_COLUMNS.items():
        value = getattr(filt, name)
        if value is not None:
            where.append(column == value)
    for column, low, high in (
        (jobs.c.created_at, filt.created_after, filt.created_before),
        (jobs.c.finished_at, filt.finished_after, filt.finished_before),
    ):
        if low is not None:
            where.append(column >= low)
        if high is not None:
            where.append(column < high)
    return where


#: Strictly after a position, in the listing's order (newest first).
_AFTER = and_(
    jobs.c.created_at <= AFTER_AT,
    or_(jobs.c.created_at < AFTER_AT, jobs.c.id < AFTER_ID),
)


def find_statement(filt: JobFilter, after: Position | None, limit: int) -> Select[Any]:
    """The jobs matching ``filt``, newest first, strictly after ``after``, at most
    ``limit`` (bind ``after_created_at``/``after_id`` with :func:`find_params`)."""
    where = conditions(filt)
    if after is not None:
        where.append(_AFTER)
    return (
        select(jobs).where(*where).order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit)
    )


def find_params(after: Position | None) -> dict[str, Any]:
    if after is None:
        return {}
    return {"after_created_at": after.created_at, "after_id": after.id}


#: Per queue: jobs that ended ``failed`` in the last ``since_s`` seconds (database clock).
FAILED_SINCE = (
    select(jobs.c.queue_name, func.count())
    .where(
        jobs.c.status == JobStatus.FAILED.value,
        jobs.c.finished_at >= db_time(-SINCE_S),
    )
    .group_by(jobs.c.queue_name)
)
#: Per queue: ``processing`` jobs whose lease expired or was released (database clock):
#: no live run holds them; a redelivery (or the reaper) must take them over.
EXPIRED_LEASES = (
    select(jobs.c.queue_name, func.count())
    .where(
        jobs.c.status == JobStatus.PROCESSING.value,
        or_(jobs.c.locked_until.is_(None), jobs.c.locked_until < db_time()),
    )
    .group_by(jobs.c.queue_name)
)


class Queries:
    """The finding side of :class:`~celery_tracked.store.JobStore`."""

    engines: Engines

    @reconnecting
    def find(self, filt: JobFilter, after: Position | None, limit: int) -> list[Job]:
        """At most ``limit`` jobs matching ``filt``, newest first, after ``after``."""
        statement = find_statement(filt, after, limit)
        with translated("listing jobs"), self.engines.transaction() as conn:
            rows = conn.execute(statement, find_params(after)).mappings().all()
        return [Job.from_row(r) for r in rows]

    @reconnecting
    def queue_health(self, since_s: float = 3600.0) -> dict[str, dict[str, int]]:
        """Per queue: ``failed_last_hour`` (ended ``failed`` in the last ``since_s``
        seconds) and ``expired_leases`` (``processing`` with no live lease)."""
        out: dict[str, dict[str, int]] = {}
        with translated("reading queue statistics"), self.engines.transaction() as conn:
            failed = conn.execute(FAILED_SINCE, {"since_s": since_s}).all()
            expired = conn.execute(EXPIRED_LEASES).all()
        for key, rows in (("failed_last_hour", failed), ("expired_leases", expired)):
            for queue, count in rows:
                entry = out.setdefault(queue, {"failed_last_hour": 0, "expired_leases": 0})
                entry[key] = int(count)
        return out
