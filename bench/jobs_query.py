"""Finding jobs at 1M rows: ``EXPLAIN (ANALYZE, BUFFERS)`` of ``Tracker.jobs``' common
filters and of ``Tracker.stats``' queries on PostgreSQL.

    python bench/jobs_query.py [--rows 1000000] [--reuse] [--drop-index NAME ...]

Creates (or, with ``--reuse``, keeps) the database of ``BENCH_JOBS_DATABASE_URL``
(default ``postgresql+psycopg://postgres@127.0.0.1:5432/ct_bench_jobs``), migrates it,
fills ``background_jobs`` with ``--rows`` rows in one ``INSERT ... SELECT
generate_series`` (30 days of jobs: 5 queues, one of them busy; 20 job types; 20,000
owners; pipelines of 5 jobs; 93 % completed, 5 % failed, 2 % cancelled, and a backlog of
pending, processing and retrying jobs among the newest 50,000), runs
``ANALYZE``, then prints each query's plan and time. The statements are the library's
own (``store/reads.py``, ``store/statements.py``), compiled for PostgreSQL.
``--drop-index`` drops an index first, to see the plan without it. Not a test: see
``bench/README.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.engine import Engine, make_url  # noqa: E402

from celery_tracked.core.finder import JobFilter, Position  # noqa: E402
from celery_tracked.core.jobs import utcnow  # noqa: E402
from celery_tracked.store import (  # noqa: E402
    migrate,
    reads,
    reaping,
    selects,
)

DATABASE_URL = os.environ.get(
    "BENCH_JOBS_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/ct_bench_jobs"
)
PAGE = 50

#: One row per ``i``: 30 days of jobs, newest first (i = 1 is a second old); each
#: attribute drawn from its own hash of ``i``, so they are independent.
GENERATE = """
INSERT INTO background_jobs (
    id, queue_name, job_type, task_name, celery_task_id, status, payload_json, result_json,
    error_type, error_message, attempts_made, max_attempts, idempotency_key, correlation_id,
    parent_job_id, owner_id, progress, stage, worker, locked_by, locked_until, created_at,
    started_at, finished_at, updated_at, published_at, key_round, revision,
    retries_exhausted, not_before
)
SELECT
    md5(i::text)::uuid::text,
    CASE WHEN h.q < 6 THEN 'default' ELSE 'queue_' || (h.q - 6) END,
    'type_' || h.t,
    'proj.tasks.type_' || h.t,
    md5(i::text)::uuid::text,
    st.status,
    '{"args": [], "kwargs": {"n": ' || i || '}}',
    CASE WHEN st.status = 'completed' THEN '{"ok": true}' END,
    CASE WHEN st.status IN ('failed', 'retrying') THEN
        CASE WHEN h.e < 2 THEN 'WorkerLost'
             ELSE (ARRAY['ValueError', 'TimeoutError', 'ConnectionError', 'KeyError'])[1 + h.e % 4]
        END END,
    CASE WHEN st.status IN ('failed', 'retrying') THEN 'boom ' || i END,
    CASE WHEN st.status = 'pending' THEN 0 ELSE 1 END,
    3,
    CASE WHEN i % 3 = 0 THEN 'key:' || i END,
    'corr_' || (i / 5),
    NULL,
    'user_' || h.o,
    CASE WHEN st.status = 'completed' THEN 100 ELSE 0 END,
    NULL,
    CASE WHEN st.status = 'pending' THEN NULL ELSE 'w1@host' END,
    CASE WHEN st.status = 'processing' THEN 'host:boot:ns:' || i END,
    CASE WHEN st.status = 'processing' THEN now() + interval '60 s' END,
    ts.created,
    CASE WHEN st.status <> 'pending' THEN ts.created + interval '1 s' END,
    CASE WHEN st.status IN ('completed', 'failed', 'cancelled')
         THEN ts.created + (1 + i % 60) * interval '1 s' END,
    ts.created + interval '1 s',
    ts.created,
    0,
    0,
    st.status = 'failed',
    CASE WHEN st.status = 'retrying' THEN ts.created + interval '5 s' END
FROM generate_series(1, :rows) AS i
CROSS JOIN LATERAL (
    SELECT now() - i * (interval '30 days' / :rows) AS created
) AS ts
CROSS JOIN LATERAL (
    SELECT abs(hashtext(i || '-q')) % 10 AS q,
           abs(hashtext(i || '-s')) % 100 AS s,
           abs(hashtext(i || '-e')) % 100 AS e,
           abs(hashtext(i || '-t')) % 20 AS t,
           abs(hashtext(i || '-o')) % 20000 AS o
) AS h
CROSS JOIN LATERAL (
    SELECT CASE
        WHEN i <= 50000 AND h.s < 5 THEN 'pending'
        WHEN i <= 50000 AND h.s = 5 THEN 'processing'
        WHEN i <= 50000 AND h.s = 6 THEN 'retrying'
        WHEN h.s BETWEEN 7 AND 11 THEN 'failed'
        WHEN h.s BETWEEN 12 AND 13 THEN 'cancelled'
        ELSE 'completed'
    END AS status
) AS st
"""


def prepare(url: str, rows: int, reuse: bool) -> Engine:
    db = make_url(url)
    admin = create_engine(db.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        exists = conn.execute(
            text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": db.database}
        ).first()
        if exists and not reuse:
            conn.execute(text(f'DROP DATABASE "{db.database}" WITH (FORCE)'))
        if not exists or not reuse:
            conn.execute(text(f'CREATE DATABASE "{db.database}"'))
    admin.dispose()
    migrate.upgrade(url)
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        have = conn.execute(text("SELECT count(*) FROM background_jobs")).scalar()
        if not have:
            started = time.monotonic()
            conn.execute(text(GENERATE), {"rows": rows})
            print(f"-- inserted {rows} rows in {time.monotonic() - started:.1f} s")
        conn.execute(text("VACUUM ANALYZE background_jobs"))
    return engine


def cases(engine: Engine) -> list[tuple[str, Any, dict[str, Any]]]:
    """``(title, statement, params)`` of each query shown."""
    with engine.connect() as conn:
        middle = conn.execute(
            text(
                "SELECT created_at, id FROM background_jobs "
                "ORDER BY created_at DESC, id DESC OFFSET 500000 LIMIT 1"
            )
        ).first()
    now = utcnow()
    out: list[tuple[str, Any, dict[str, Any]]] = []

    def listing(title: str, after: Position | None = None, **filters: Any) -> None:
        filt = JobFilter.of(now=now, **filters)
        statement = reads.find_statement(filt, after, PAGE + 1)
        out.append((title, statement, reads.find_params(after)))

    listing("newest jobs (no filter)")
    if middle is not None:
        listing("page 10,001 (a cursor 500,000 rows deep)", Position(middle[0], middle[1]))
    listing("status = failed", status="failed")
    listing("status in (failed, cancelled)", status=["failed", "cancelled"])
    listing("status = pending", status="pending")
    listing("queue = queue_3, status = failed", queue="queue_3", status="failed")
    listing("queue = rare (matches nothing: the worst case)", queue="rare")
    listing("job_type = type_7", job_type="type_7")
    listing("job_type = rare (matches nothing)", job_type="rare")
    listing("task_name = proj.tasks.type_7", task_name="proj.tasks.type_7")
    listing("task_name = rare (matches nothing)", task_name="rare")
    listing("owner_id = user_123", owner_id="user_123")
    listing("correlation_id = corr_1234", correlation_id="corr_1234")
    listing("error_type = WorkerLost (rare)", error_type="WorkerLost")
    listing("status = failed, error_type = WorkerLost", status="failed", error_type="WorkerLost")
    listing(
        "created in one hour, 10 days ago",
        created_after=now - timedelta(days=10, hours=1),
        created_before=now - timedelta(days=10),
    )
    listing("failed, finished in the last hour", status="failed", finished_after=timedelta(hours=1))
    out.append(("stats: counts per queue and status", selects.COUNT_BY_STATUS, {}))
    out.append(("stats: oldest pending per queue", selects.OLDEST_PENDING, {}))
    out.append(("stats: failed in the last hour", reads.FAILED_SINCE, {"since_s": 3600.0}))
    out.append(("stats: expired leases", reads.EXPIRED_LEASES, {}))
    stalled = {"grace_s": 15.0, "limit": 100, "run_cutoff": now - timedelta(seconds=60)}
    stalled.update(pending_cutoff=now - timedelta(seconds=600))
    stalled.update(retrying_cutoff=now - timedelta(seconds=300))
    out.append(("reaper: lapsed runs", reaping.SELECT_STALLED_RUNS, stalled))
    out.append(("reaper: pending long past hand-over", reaping.SELECT_STALLED_PENDING, stalled))
    out.append(("reaper: retrying long past due", reaping.SELECT_STALLED_RETRYING, stalled))
    return out


def explain(engine: Engine, statement: Any, params: dict[str, Any]) -> str:
    compiled = statement.compile(
        dialect=engine.dialect, compile_kwargs={"render_postcompile": True}
    )
    values = {**compiled.params, **params}
    with engine.connect() as conn:
        conn.exec_driver_sql(str(compiled), values).all()  # warm the cache
        rows = conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY ON) " + str(compiled), values
        ).all()
    return "\n".join(r[0] for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reuse", action="store_true", help="keep an existing database")
    parser.add_argument("--drop-index", action="append", default=[], metavar="NAME")
    args = parser.parse_args()
    engine = prepare(DATABASE_URL, args.rows, args.reuse)
    with engine.connect() as conn:
        for name in args.drop_index:
            conn.execute(text(f'DROP INDEX IF EXISTS "{name}"'))
        total = conn.execute(text("SELECT count(*) FROM background_jobs")).scalar()
    print(f"-- background_jobs: {total} rows")
    for title, statement, params in cases(engine):
        plan = explain(engine, statement, params)
        execution = [line for line in plan.splitlines() if "Execution Time" in line]
        print(f"\n### {title} ({execution[0].strip() if execution else '?'})\n")
        print(plan)
    engine.dispose()


if __name__ == "__main__":
    main()
