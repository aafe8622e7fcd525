"""The read side of the store (``Reader``, ``KeyReader``, ``ReadStore``): one job, a job
by key, a job's history, queue statistics, the listing of jobs and the queues' health, the
relay's backlog (read by the metrics on every scrape, from the ``(status, created_at)``
index).

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

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Float,
    Integer,
    Select,
    and_,
    bindparam,
    func,
    or_,
    select,
)

from ..core.cleanup import ENDED
from ..core.finder import JobFilter, Position
from ..core.jobs import Job, JobEvent, JobStatus
from ..core.throughput import EndedRun
from . import selects
from .clock import db_time
from .engines import Engines
from .holds import HELD_ON_PURPOSE
from .models import UTCDateTime, jobs
from .statements import CUTOFF, DUE, param
from .translate import reconnecting, translated

#: PostgreSQL tables estimated at this many rows or more get estimated ended counts.
ESTIMATE_ABOVE = 1_000_000
#: About this many rows are sampled for the estimate (1 % of 10M rows).
SAMPLE_ROWS = 100_000
#: Ended groups estimated under this many rows are counted exactly...
EXACT_BELOW = 100_000
#: ...while the rows so counted (as estimated) stay under this many per call.
EXACT_BUDGET = 1_000_000


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
    "tenant": jobs.c.tenant,
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
    if filt.priority is not None:
        where.append(jobs.c.priority == filt.priority)
    for column, low, high in (
        (jobs.c.created_at, filt.created_after, filt.created_before),
        (jobs.c.finished_at, filt.finished_after, filt.finished_before),
        (jobs.c.not_before, filt.due_after, filt.due_before),
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
#: The newest jobs that ended within the last ``since_s`` seconds (database clock), at
#: most ``limit``: the throughput's bounded read (``ix_background_jobs_finished_at``).
ENDED_RUNS = (
    select(jobs.c.queue_name, jobs.c.status, jobs.c.started_at, jobs.c.finished_at)
    .where(jobs.c.finished_at >= db_time(-SINCE_S))
    .order_by(jobs.c.finished_at.desc())
    .limit(bindparam("limit", type_=Integer))
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


#: Pending rows whose message was never handed to the broker, older than the relay's grace.
COUNT_UNPUBLISHED = (
    select(func.count())
    .select_from(jobs)
    .where(
        jobs.c.status == JobStatus.PENDING.value,
        jobs.c.published_at.is_(None),
        jobs.c.updated_at < CUTOFF,
        or_(jobs.c.locked_by.is_(None), ~HELD_ON_PURPOSE),  # a pause's or a circuit's hold
        *DUE,  # a held job (not due yet) is the scheduler's, not a lost publish
    )
)


class Reads:
    """The read side of :class:`~celery_tracked.store.JobStore`."""

    engines: Engines

    @reconnecting
    def get(self, job_id: str) -> Job | None:
        with translated("reading the job"), self.engines.transaction() as conn:
            row = conn.execute(selects.SELECT_JOB, {"job_id": job_id}).mappings().first()
        return None if row is None else Job.from_row(row)

    @reconnecting
    def clock(self) -> datetime:
        """The database's current time: the clock leases are judged on."""
        with translated("reading the database clock"):
            row = self.engines.execute(selects.SELECT_CLOCK, {})
        assert row is not None
        return row[0]  # type: ignore[no-any-return]

    @reconnecting
    def find_by_key(self, job_type: str, key: str) -> Job | None:
        params = {"job_type": job_type, "idempotency_key": key}
        with translated("reading the job"), self.engines.transaction() as conn:
            row = conn.execute(selects.SELECT_BY_KEY, params).mappings().first()
        return None if row is None else Job.from_row(row)

    @reconnecting
    def pipeline(self, correlation_id: str) -> list[Job]:
        """The jobs sharing ``correlation_id``, oldest first."""
        params = {"correlation_id": correlation_id}
        with translated("reading the pipeline"), self.engines.transaction() as conn:
            rows = conn.execute(selects.SELECT_PIPELINE, params).mappings().all()
        return [Job.from_row(r) for r in rows]

    @reconnecting
    def events(self, job_id: str) -> list[JobEvent]:
        with translated("reading the job history"), self.engines.transaction() as conn:
            rows = conn.execute(selects.SELECT_EVENTS, {"job_id": job_id}).mappings().all()
        return [JobEvent.from_row(r) for r in rows]

    @reconnecting
    def stats(self, now: datetime | None = None) -> dict[str, dict[str, Any]]:
        """Counts per queue and status, the age of the oldest pending job that is due, and
        ``scheduled``: the pending jobs not due yet (counted in ``pending`` too).

        Exact, except on PostgreSQL for a table the planner estimates at
        :data:`ESTIMATE_ABOVE` rows or more: there the ended statuses' counts are
        estimated from a block sample (the active ones stay exact; see
        :meth:`_counts`)."""
        now = now or self.clock()  # the database's: created_at is not this host's
        with translated("reading queue statistics"), self.engines.transaction() as conn:
            count_rows = self._counts(conn)
            oldest_rows = conn.execute(selects.OLDEST_PENDING).all()
            scheduled_rows = conn.execute(selects.COUNT_SCHEDULED).all()
        out: dict[str, dict[str, Any]] = {}
        for queue, status, n in count_rows:
            entry = out.setdefault(queue, _empty_stats())
            entry["counts"][status] = n
            entry["total"] += n
        for queue, created in oldest_rows:
            if created is None:
                continue
            if created.tzinfo is None:
                created = created.replace(tzinfo=timezone.utc)
            out.setdefault(queue, _empty_stats())["oldest_pending_age_s"] = max(
                0.0, (now - created).total_seconds()
            )
        for queue, n in scheduled_rows:
            out.setdefault(queue, _empty_stats())["scheduled"] = int(n)
        return out

    def _counts(self, conn: Connection) -> list[tuple[str, str, int]]:
        """``(queue, status, count)`` rows: an exact ``GROUP BY`` reads every row (an
        index-only scan: ~0.2 s per million rows here, more with several cores busy), so
        a big PostgreSQL table is counted by :func:`_big_table_counts` instead."""
        estimated = -1.0
        if self.engines.is_postgres:
            estimated = float(conn.execute(selects.ESTIMATED_ROWS).scalar() or -1)
        if estimated < ESTIMATE_ABOVE:
            return [(q, s, int(n)) for q, s, n in conn.execute(selects.COUNT_BY_STATUS)]
        return _big_table_counts(conn, estimated)

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

    @reconnecting
    def ended_runs(self, since_s: float, limit: int) -> list[EndedRun]:
        """``ENDED_RUNS``: the newest jobs ended in the last ``since_s`` seconds."""
        params = {"since_s": since_s, "limit": limit}
        with translated("reading the throughput"), self.engines.transaction() as conn:
            return [EndedRun(*row) for row in conn.execute(ENDED_RUNS, params).all()]

    @reconnecting
    def backlog(self, *, cutoff: datetime) -> int:
        """Pending rows never handed to the broker, last changed before ``cutoff``."""
        with translated("reading the relay backlog"), self.engines.transaction() as conn:
            return int(conn.execute(COUNT_UNPUBLISHED, {"cutoff": cutoff}).scalar_one())


def _big_table_counts(conn: Connection, estimated: float) -> list[tuple[str, str, int]]:
    """Counts that read a bounded number of rows, without anything maintained on the hot
    path: the active statuses exactly (from their index); every ``(queue, status)``
    group present found by a loose index scan; each ended group estimated from a block
    sample of ~:data:`SAMPLE_ROWS` rows scaled to the planner's row estimate, except
    that the groups estimated under :data:`EXACT_BELOW` rows (where a sample's relative
    error is large) are counted exactly, smallest first, while their estimates sum to
    less than :data:`EXACT_BUDGET` rows. So small and rare groups are exact and never
    missing; only big ended groups are estimates (within a few percent)."""
    rows = [(q, s, int(n)) for q, s, n in conn.execute(selects.COUNT_ACTIVE_BY_STATUS)]
    percent = min(100.0, 100.0 * SAMPLE_ROWS / estimated)
    sample: dict[tuple[str, str], float] = {}
    for queue, status, n, sampled in conn.execute(
        selects.SAMPLE_ENDED_BY_STATUS, {"percent": percent}
    ):
        sample[(queue, status)] = n * estimated / int(sampled)
    ended = [(q, s) for q, s in conn.execute(selects.GROUPS) if s in ENDED]
    budget = float(EXACT_BUDGET)
    for queue, status in sorted(ended, key=lambda group: sample.get(group, 0.0)):
        guess = sample.get((queue, status), 0.0)
        if guess < EXACT_BELOW and guess < budget:
            budget -= guess
            params = {"queue_name": queue, "status": status}
            rows.append(
                (queue, status, int(conn.execute(selects.COUNT_GROUP, params).scalar_one()))
            )
        else:
            rows.append((queue, status, max(1, round(guess))))
    return rows


def _empty_stats() -> dict[str, Any]:
    return {
        "counts": {s.value: 0 for s in JobStatus},
        "total": 0,
        "oldest_pending_age_s": None,
        "scheduled": 0,
    }
