"""Cleanup benchmark: 1,000,000 old completed rows (3 events each) removed by the cleanup.

    python bench/cleanup.py [--rows 1000000] [--batch-size 5000] [--no-keys]

Drops and re-creates the database ``BENCH_CLEANUP_DATABASE_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/ct_bench_cleanup``), migrates it, inserts
the rows directly with ``generate_series`` (plus 10,000 recent completed and 1,000 pending
rows that must survive), runs ``ANALYZE``, prints the ``EXPLAIN (ANALYZE, BUFFERS)`` of
the first batch's select, then times ``Tracker.cleanup()`` and checks what is left.
The rows carry idempotency keys (``--no-keys``: none), so the guard's compare-and-delete
runs for each (on ``BENCH_REDIS_URL``, default: a Redis of its own, ``bench/own_redis.py``).

Writes ``bench/results/cleanup-latest.json``. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from celery import Celery  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.dialects import postgresql  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from bench.own_redis import own_redis  # noqa: E402
from celery_tracked import Tracker  # noqa: E402
from celery_tracked.core.retention import Sweep  # noqa: E402
from celery_tracked.store import migrate  # noqa: E402
from celery_tracked.store.purge import START, statements  # noqa: E402

RESULTS = ROOT / "bench" / "results"
ADMIN_URL = os.environ.get(
    "BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
DATABASE_URL = os.environ.get(
    "BENCH_CLEANUP_DATABASE_URL",
    "postgresql+psycopg://postgres@127.0.0.1:5432/ct_bench_cleanup",
)
REDIS_URL = own_redis("BENCH_REDIS_URL")

COLUMNS = (
    "id, queue_name, job_type, task_name, celery_task_id, status, payload_json, "
    "attempts_made, max_attempts, idempotency_key, correlation_id, progress, created_at, "
    "started_at, finished_at, updated_at, published_at, key_round, revision, "
    "retries_exhausted"
)
#: ``n`` rows of ``status`` that finished ``age`` ago (a second apart); ids from md5.
ROWS = f"""
INSERT INTO background_jobs ({COLUMNS})
SELECT uid, 'bench', 'bench.job', 'bench.job', uid,
       CAST(:status AS text), '{{"args": [], "kwargs": {{"n": ' || g || '}}}}', 1, 3,
       CASE WHEN CAST(:keys AS boolean) THEN CAST(:tag AS text) || g END, uid, 100,
       now() - :age - interval '1 minute', now() - :age - interval '30 seconds',
       CASE WHEN CAST(:status AS text) IN ('completed', 'failed', 'cancelled')
            THEN now() - :age - g * interval '1 millisecond' END,
       now() - :age, now() - :age - interval '1 minute', 0, 0, false
FROM (SELECT g, md5(CAST(:tag AS text) || g)::uuid::text AS uid
      FROM generate_series(1, CAST(:n AS integer)) AS g) AS numbered
"""
EVENTS = """
INSERT INTO background_job_events (job_id, event, status, attempt, created_at)
SELECT md5(CAST(:tag AS text) || g)::uuid::text, e.event, e.status, 1, now() - :age
FROM generate_series(1, CAST(:n AS integer)) AS g
CROSS JOIN (VALUES ('enqueued', 'pending'), ('started', 'processing'),
                   ('completed', 'completed')) AS e(event, status)
"""


def log(message: str) -> None:
    print(f"[bench-cleanup] {message}", file=sys.stderr, flush=True)


def recreate(url: str) -> None:
    name = make_url(url).database
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    migrate.upgrade(url)


def seed(url: str, rows: int, keys: bool, young: bool) -> float:
    """``young``: the old rows were created an hour ago (the cleanup then judges ages 8
    days ahead), so each one's guard entry may still exist and is compare-and-deleted."""
    engine = create_engine(url)
    started = time.monotonic()
    with engine.begin() as conn:
        for tag, status, n, age in (
            ("old-", "completed", rows, "1 hour" if young else "10 days"),
            ("recent-", "completed", 10_000, "-2 days" if young else "1 day"),
            ("active-", "pending", 1_000, "30 days"),
        ):
            params = {"tag": tag, "status": status, "n": n, "keys": keys}
            conn.execute(text(ROWS.replace(":age", f"interval '{age}'")), params)
            conn.execute(text(EVENTS.replace(":age", f"interval '{age}'")), params)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE background_jobs"))
        conn.execute(text("VACUUM ANALYZE background_job_events"))
    engine.dispose()
    return time.monotonic() - started


def explain(url: str, batch_size: int, young: bool) -> str:
    """The plan of the first batch's select of the completed sweep, run and rolled back."""
    ahead = timedelta(days=8) if young else timedelta(0)
    sweep = Sweep("completed", datetime.now(timezone.utc) + ahead - timedelta(days=7))
    compiled = statements(sweep).select.compile(dialect=postgresql.dialect())
    params: dict[str, Any] = dict(compiled.params)
    params.update(after_at=START[0], after_id=START[1], limit=batch_size)
    engine = create_engine(url)
    with engine.connect() as conn:
        sql = "EXPLAIN (ANALYZE, BUFFERS) " + str(compiled)
        lines = [r[0] for r in conn.exec_driver_sql(sql, params).all()]
        conn.rollback()
    engine.dispose()
    return "\n".join(lines)


def count(url: str, where: str) -> int:
    engine = create_engine(url)
    with engine.connect() as conn:
        n = int(conn.execute(text(f"SELECT count(*) FROM {where}")).scalar_one())
    engine.dispose()
    return n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--no-keys", action="store_true", help="rows without idempotency key")
    parser.add_argument(
        "--young", action="store_true", help="rows created an hour ago: guard entries released"
    )
    parser.add_argument("--seed-only", action="store_true", help="seed and explain, no cleanup")
    parser.add_argument(
        "--reuse", action="store_true", help="clean up what a --seed-only run left (no re-seed)"
    )
    args = parser.parse_args()

    seeded_s = 0.0
    if not args.reuse:
        log(f"re-creating {make_url(DATABASE_URL).database} and inserting {args.rows:,} rows")
        recreate(DATABASE_URL)
        seeded_s = seed(DATABASE_URL, args.rows, not args.no_keys, args.young)
        log(f"seeded in {seeded_s:.1f} s")
    plan = explain(DATABASE_URL, args.batch_size, args.young)
    print(plan)
    if args.seed_only:
        return 0

    app = Celery("bench_cleanup", set_as_current=False)
    app.conf.update(
        tracked_database_url=DATABASE_URL,
        tracked_redis_url=REDIS_URL,
        tracked_cleanup_batch_size=args.batch_size,
    )
    tracker = Tracker.for_app(app)
    batches = 0

    def progress(n: int) -> None:
        nonlocal batches
        batches += 1
        if batches % 40 == 0:
            log(f"{batches} batches")

    started = time.monotonic()
    now = datetime.now(timezone.utc) + timedelta(days=8) if args.young else None
    report = tracker.cleanup(on_batch=progress, now=now)
    elapsed = time.monotonic() - started
    tracker.close()

    left_old = count(DATABASE_URL, "background_jobs WHERE idempotency_key LIKE 'old-%'")
    left = count(DATABASE_URL, "background_jobs")
    left_events = count(DATABASE_URL, "background_job_events")
    ok = (
        report.total == args.rows
        and report.events == 3 * args.rows
        and left == 11_000
        and left_events == 3 * 11_000
        and (args.no_keys or left_old == 0)
    )
    result = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "rows": args.rows,
        "batch_size": args.batch_size,
        "keys": not args.no_keys,
        "young": args.young,
        "seed_s": round(seeded_s, 1),
        "cleanup_s": round(elapsed, 2),
        "rows_per_s": round(args.rows / elapsed),
        "report": report.as_dict(),
        "left": {"jobs": left, "events": left_events},
        "checks_ok": ok,
        "explain": plan.splitlines(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cleanup-latest.json").write_text(json.dumps(result, indent=2))
    print(
        f"cleanup of {args.rows:,} rows ({3 * args.rows:,} events): {elapsed:.1f} s "
        f"({result['rows_per_s']:,} rows/s, {report.batches} batches of {args.batch_size}); "
        f"left {left:,} jobs, {left_events:,} events; checks {'ok' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
