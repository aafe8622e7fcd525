"""The store's reads (one job, by key, a pipeline, a job's history, statistics, the
relay's candidates, the clock) and the two deletes of an undone enqueue: each written once,
as a Core statement, beside the moves of ``statements``."""

from __future__ import annotations

from sqlalchemy import Delete, Integer, String, TextClause, delete, func, or_, select, text

from ..core.jobs import JobStatus
from .clock import db_time
from .holds import HELD_ON_PURPOSE, UNPAUSED, UNPUBLISHED, UNTRIPPED
from .models import UTCDateTime, events, jobs
from .statements import DUE, JOB_ID, NOW, param

#: The statuses of jobs not ended yet.
ACTIVE = (JobStatus.PENDING, JobStatus.PROCESSING, JobStatus.RETRYING)

SELECT_JOB = select(jobs).where(jobs.c.id == JOB_ID)
#: The key's newest job (its latest round).
SELECT_BY_KEY = (
    select(jobs)
    .where(
        jobs.c.job_type == param("job_type", String),
        jobs.c.idempotency_key == param("idempotency_key", String),
    )
    .order_by(jobs.c.key_round.desc())
    .limit(1)
)
SELECT_PIPELINE = (
    select(jobs)
    .where(jobs.c.correlation_id == param("correlation_id", String))
    .order_by(jobs.c.created_at, jobs.c.id)
)
SELECT_ATTEMPTS = select(jobs.c.attempts_made, jobs.c.max_attempts).where(jobs.c.id == JOB_ID)
SELECT_CLOCK = select(db_time())
#: PostgreSQL: the process id of the server process answering this session.
SELECT_BACKEND_PID = select(func.pg_backend_pid())
SELECT_ATTEMPTS_STATUS = select(jobs.c.attempts_made, jobs.c.status).where(jobs.c.id == JOB_ID)
SELECT_EVENTS = select(events).where(events.c.job_id == JOB_ID).order_by(events.c.id)
COUNT_BY_STATUS = select(jobs.c.queue_name, jobs.c.status, func.count()).group_by(
    jobs.c.queue_name, jobs.c.status
)
#: Exact counts of the active statuses only (a few thousand rows, from the
#: ``(status, created_at)`` index however big the table is).
COUNT_ACTIVE_BY_STATUS = (
    select(jobs.c.queue_name, jobs.c.status, func.count())
    .where(jobs.c.status.in_([s.value for s in ACTIVE]))
    .group_by(jobs.c.queue_name, jobs.c.status)
)
#: PostgreSQL: the table's row count as the planner estimates it (the density of the last
#: ``ANALYZE``/``VACUUM`` times the table's current size, as the planner does); -1: never
#: analysed.
ESTIMATED_ROWS: TextClause = text(
    "SELECT CASE WHEN c.relpages > 0 AND c.reltuples >= 0 THEN c.reltuples / c.relpages"
    " * (pg_relation_size(c.oid) / current_setting('block_size')::int) ELSE -1 END"
    " FROM pg_class AS c WHERE c.oid = to_regclass('background_jobs')"
)
#: PostgreSQL: the ended statuses counted in a block sample of ``:percent`` % of the table
#: (the same blocks on every call while the table keeps its size: a gauge does not jitter),
#: with the number of rows sampled, to scale them by.
SAMPLE_ENDED_BY_STATUS: TextClause = text(
    "SELECT queue_name, status, count(*), CAST(sum(count(*)) OVER () AS bigint)"
    " FROM background_jobs TABLESAMPLE SYSTEM (:percent) REPEATABLE (15)"
    " GROUP BY queue_name, status"
)
#: PostgreSQL: every ``(queue, status)`` present, one index descent each on
#: ``ix_background_jobs_queue_name_status`` (a "loose index scan"): no group is missed,
#: however rare, and no row is read twice.
GROUPS: TextClause = text(
    "WITH RECURSIVE g AS ("
    " (SELECT queue_name, status FROM background_jobs ORDER BY queue_name, status LIMIT 1)"
    " UNION ALL SELECT n.queue_name, n.status FROM g CROSS JOIN LATERAL ("
    " SELECT j.queue_name, j.status FROM background_jobs AS j"
    " WHERE (j.queue_name, j.status) > (g.queue_name, g.status)"
    " ORDER BY j.queue_name, j.status LIMIT 1) AS n"
    ") SELECT queue_name, status FROM g"
)
#: One group's exact count (an index-only scan of that group's entries).
COUNT_GROUP = (
    select(func.count())
    .select_from(jobs)
    .where(
        jobs.c.queue_name == param("queue_name", String),
        jobs.c.status == param("status", String),
    )
)
#: Of the pending jobs that are due (a held or counting-down one waits on purpose).
OLDEST_PENDING = (
    select(jobs.c.queue_name, func.min(jobs.c.created_at))
    .where(jobs.c.status == JobStatus.PENDING.value, *DUE)
    .group_by(jobs.c.queue_name)
)
#: Per queue: pending jobs not due yet (a countdown/eta; held ones among them).
COUNT_SCHEDULED = (
    select(jobs.c.queue_name, func.count())
    .where(jobs.c.status == JobStatus.PENDING.value, jobs.c.not_before > db_time())
    .group_by(jobs.c.queue_name)
)
#: Due at the relay pass's ``now`` (one not due yet is the scheduler's: ``HELD_DUE``).
_DUE_NOW = or_(jobs.c.not_before.is_(None), jobs.c.not_before <= NOW)
#: The relay's: pending rows never handed over, due, no pause covering them.
SELECT_UNPUBLISHED = (
    select(jobs.c.id, jobs.c.created_at)
    .where(jobs.c.status == JobStatus.PENDING.value, *UNPUBLISHED, _DUE_NOW)
    .order_by(jobs.c.created_at)
    .limit(100)
)
#: The retrying rows a pause or a circuit held, now free of it (``UNPUBLISHED``): the relay's
#: too, due or not (published with the rest of their backoff, as a retry's message waits in
#: the broker).
SELECT_HELD_RETRYING = (
    select(jobs.c.id, jobs.c.created_at)
    .where(jobs.c.status == JobStatus.RETRYING.value, HELD_ON_PURPOSE, *UNPUBLISHED)
    .order_by(jobs.c.created_at)
    .limit(100)
)
#: The scheduler's: pending rows without a message whose due time comes before ``until``,
#: not held by a relay or a pass now, no pause covering them (a paused one waits for its
#: resume; the partial index ``ix_background_jobs_held_due``).
HELD_DUE = (
    select(jobs)
    .where(
        jobs.c.published_at.is_(None),
        jobs.c.not_before.is_not(None),
        jobs.c.not_before <= param("until", UTCDateTime),
        jobs.c.status == JobStatus.PENDING.value,
        or_(jobs.c.locked_until.is_(None), jobs.c.locked_until < db_time()),
        UNPAUSED,
        UNTRIPPED,
    )
    .order_by(jobs.c.not_before)
    .limit(param("limit", Integer))
)
DELETE_EVENTS: Delete = delete(events).where(events.c.job_id == JOB_ID)
#: Undo of an enqueue whose publish failed: only while nobody else handed the row over.
DELETE_UNPUBLISHED: Delete = delete(jobs).where(
    jobs.c.id == JOB_ID,
    jobs.c.status == JobStatus.PENDING.value,
    jobs.c.published_at.is_(None),
    jobs.c.locked_by.is_(None),
)
