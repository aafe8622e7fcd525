"""Filling ``background_jobs`` to millions of rows in SQL, for ``bench/big_table.py``.

The mix (each attribute from its own hash of the row number ``i``, so they are independent;
``i = 1`` is the newest row, rows spread evenly over 90 days):

- status: 90 % completed, 4 % failed, 1 % cancelled; among the newest 40,000 rows about
  2,000 pending, 800 processing (leases 10 minutes ahead) and 400 retrying (due in the
  future), so the active set is a few thousand rows, as in a healthy production table;
- 6 queues (``default`` holds 40 %), 20 task names (= job types);
- 30 % carry an idempotency key, 30 % a correlation id (pipelines of 4), 30 % an owner id
  (20,000 owners); failed and retrying rows an error type (5 kinds, ``WorkerLost`` rare);
- events: ``--events-per-job`` rows per job (default 2: ``enqueued`` and the row's latest
  event), all with the job's times.

Fast fill: the table's indexes and constraints are dropped, the rows inserted by one
``INSERT ... SELECT generate_series`` per table, then every index is rebuilt (with the
session's ``maintenance_work_mem`` raised), then ``VACUUM (ANALYZE)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.engine import Connection

DAYS = 90

JOBS = f"""
INSERT INTO background_jobs (
    id, queue_name, job_type, task_name, celery_task_id, status, payload_json, result_json,
    error_type, error_message, attempts_made, max_attempts, idempotency_key, correlation_id,
    parent_job_id, owner_id, progress, stage, worker, locked_by, locked_until, created_at,
    started_at, finished_at, updated_at, published_at, key_round, revision,
    retries_exhausted, not_before
)
SELECT
    md5(i::text)::uuid::text,
    CASE WHEN h.q < 4 THEN 'default' ELSE 'queue_' || (h.q - 4) % 5 END,
    'proj.tasks.type_' || h.t,
    'proj.tasks.type_' || h.t,
    md5(i::text)::uuid::text,
    st.status,
    '{{"args": [' || i || '], "kwargs": {{"user": ' || h.o || '}}}}',
    CASE WHEN st.status = 'completed' THEN '{{"ok": true}}' END,
    CASE WHEN st.status IN ('failed', 'retrying') THEN
        CASE WHEN h.e < 2 THEN 'WorkerLost'
             ELSE (ARRAY['ValueError', 'TimeoutError', 'ConnectionError', 'KeyError'])[1 + h.e % 4]
        END END,
    CASE WHEN st.status IN ('failed', 'retrying') THEN 'boom ' || i END,
    CASE WHEN st.status = 'pending' THEN 0 WHEN st.status = 'failed' THEN 3 ELSE 1 END,
    3,
    CASE WHEN h.k < 30 THEN 'key:' || i END,
    CASE WHEN h.c < 30 THEN 'corr_' || (i / 4) END,
    NULL,
    CASE WHEN h.w < 30 THEN 'user_' || h.o END,
    CASE WHEN st.status = 'completed' THEN 100 ELSE 0 END,
    NULL,
    CASE WHEN st.status = 'pending' THEN NULL ELSE 'celery@w' || (i % 4) END,
    CASE WHEN st.status = 'processing' THEN 'host:boot:ns:' || i END,
    CASE WHEN st.status = 'processing' THEN now() + interval '10 minutes' END,
    ts.created,
    CASE WHEN st.status <> 'pending' THEN ts.created + interval '1 s' END,
    CASE WHEN st.status IN ('completed', 'failed', 'cancelled')
         THEN ts.created + (1 + i % 60) * interval '1 s' END,
    ts.created + interval '1 s',
    ts.created,
    0,
    0,
    st.status = 'failed',
    CASE WHEN st.status = 'retrying' THEN now() + interval '10 minutes' END
FROM generate_series(1, CAST(:rows AS bigint)) AS i
CROSS JOIN LATERAL (
    SELECT now() - i * (interval '{DAYS} days' / CAST(:rows AS bigint)) AS created
) AS ts
CROSS JOIN LATERAL (
    SELECT abs(hashtext(i || 'q')) % 10 AS q, abs(hashtext(i || 's')) % 1000 AS s,
           abs(hashtext(i || 'e')) % 100 AS e, abs(hashtext(i || 't')) % 20 AS t,
           abs(hashtext(i || 'o')) % 20000 AS o, abs(hashtext(i || 'k')) % 100 AS k,
           abs(hashtext(i || 'c')) % 100 AS c, abs(hashtext(i || 'w')) % 100 AS w
) AS h
CROSS JOIN LATERAL (
    SELECT CASE
        WHEN i <= 40000 AND h.s < 50 THEN 'pending'
        WHEN i <= 40000 AND h.s < 70 THEN 'processing'
        WHEN i <= 40000 AND h.s < 80 THEN 'retrying'
        WHEN h.s >= 950 AND h.s < 990 THEN 'failed'
        WHEN h.s >= 990 THEN 'cancelled'
        ELSE 'completed'
    END AS status
) AS st
"""

#: ``:per`` events per job: ``enqueued`` first, then the row's latest state.
EVENTS = """
INSERT INTO background_job_events (job_id, event, status, attempt, message, duration_ms,
                                   created_at)
SELECT j.id,
       CASE WHEN n = 1 THEN 'enqueued'
            WHEN j.status IN ('pending', 'processing') THEN 'started'
            WHEN j.status = 'retrying' THEN 'retry_scheduled'
            ELSE j.status END,
       CASE WHEN n = 1 THEN 'pending' ELSE j.status END,
       CASE WHEN n = 1 THEN 0 ELSE j.attempts_made END,
       CASE WHEN n > 1 THEN j.error_message END,
       CASE WHEN n > 1 AND j.finished_at IS NOT NULL
            THEN (extract(epoch FROM j.finished_at - j.started_at) * 1000)::int END,
       CASE WHEN n = 1 THEN j.created_at ELSE coalesce(j.finished_at, j.updated_at) END
FROM background_jobs AS j
CROSS JOIN generate_series(1, CAST(:per AS integer)) AS n
ORDER BY j.created_at, n
"""

#: The table's constraints other than the primary key (recreated as they were).
CONSTRAINTS = """
SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = CAST(:table AS regclass) AND contype IN ('p', 'u')
"""
INDEXES = """
SELECT i.indexname, i.indexdef FROM pg_indexes AS i
WHERE i.tablename = :table AND NOT EXISTS (
    SELECT 1 FROM pg_constraint AS c WHERE c.conname = i.indexname)
"""


def _drop_indexes(conn: Connection, table: str) -> list[str]:
    """Drops every index and key of ``table``; returns the statements that rebuild them."""
    rebuild: list[str] = []
    for name, definition in conn.execute(text(CONSTRAINTS), {"table": table}).all():
        conn.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"'))
        rebuild.append(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
    for name, definition in conn.execute(text(INDEXES), {"table": table}).all():
        conn.execute(text(f'DROP INDEX "{name}"'))
        rebuild.append(definition)
    return rebuild


def fill(
    conn: Connection, rows: int, events_per_job: int, log: Callable[[str], None]
) -> dict[str, float]:
    """Fills both tables on ``conn`` (autocommit); returns seconds per phase."""
    timings: dict[str, float] = {}

    def timed(phase: str, statement: str, params: dict[str, int] | None = None) -> None:
        started = time.monotonic()
        conn.execute(text(statement), params or {})
        timings[phase] = timings.get(phase, 0.0) + time.monotonic() - started
        what = " ".join(statement.split(" ON ")[0].split())[:60]
        log(f"{phase}: {time.monotonic() - started:.1f} s ({what})")

    conn.execute(text("SET maintenance_work_mem = '1GB'"))
    conn.execute(text("SET synchronous_commit = off"))
    rebuild = [*_drop_indexes(conn, "background_jobs")]
    rebuild += _drop_indexes(conn, "background_job_events")
    timed("insert jobs", JOBS, {"rows": rows})
    if events_per_job:
        timed("insert events", EVENTS, {"per": events_per_job})
    for statement in rebuild:
        timed("build indexes", statement)
    timed("vacuum analyze", "VACUUM (ANALYZE) background_jobs")
    timed("vacuum analyze", "VACUUM (ANALYZE) background_job_events")
    return timings
