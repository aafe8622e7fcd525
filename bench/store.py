"""Store benchmark: the hot statements of one job, timed call by call on PostgreSQL.

    python bench/store.py [--jobs 2000] [--repeat 3] [--server-sync on|off] [--prepare on|off]

For each run: ``--jobs`` enqueue inserts (``JobStore.insert``: the row and its
``enqueued`` event), then a claim and a completion of each job, from one thread, through
the psycopg fast path. Prints the median and p99 latency of each call (µs) and the rate.
``--server-sync off`` sets the database's default ``synchronous_commit`` to ``off`` (the
common tuning under which a write that does not ask for ``on`` is not durable);
``--prepare off`` runs as ``tracked_database_pooler = "pgbouncer"`` (no server-side
prepared statements). Not a test: see ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery_tracked.core.fences import Completion, Lease

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402

from bench.run import fresh_database, percentile  # noqa: E402
from celery_tracked.core.jobs import utcnow  # noqa: E402
from celery_tracked.store import JobStore  # noqa: E402

DATABASE_URL = os.environ.get(
    "BENCH_STORE_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/ct_bench_store"
)


def new_row() -> dict[str, Any]:
    job_id = str(uuid.uuid4())
    now = utcnow()
    return {
        "id": job_id,
        "queue_name": "q",
        "job_type": "bench",
        "task_name": "bench.noop",
        "celery_task_id": job_id,
        "status": "pending",
        "payload_json": '{"args": [1, 2], "kwargs": {"x": "y"}}',
        "max_attempts": 3,
        "idempotency_key": None,
        "correlation_id": job_id,
        "parent_job_id": None,
        "owner_id": None,
        "created_at": now,
        "updated_at": now,
    }


def timed(calls: list[Callable[[], Any]]) -> list[float]:
    took = []
    for call in calls:
        started = time.perf_counter()
        call()
        took.append((time.perf_counter() - started) * 1e6)
    return sorted(took)


def one_run(store: JobStore, jobs: int) -> dict[str, list[float]]:
    rows = [new_row() for _ in range(jobs)]
    out = {"insert": timed([lambda r=r: store.insert(r) for r in rows])}
    claims: list[Any] = []

    def claim(job_id: str) -> None:
        claims.append(
            store.claim(job_id, Lease(owner="bench:1", worker="bench", now=utcnow(), lease_s=60))
        )

    out["claim"] = timed([lambda r=r: claim(r["id"]) for r in rows])
    out["complete"] = timed(
        [
            lambda c=c: store.complete(
                c, Completion(result_json="null", now=utcnow(), duration_ms=1)
            )
            for c in claims
        ]
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--server-sync", choices=("on", "off"), default="on")
    parser.add_argument("--prepare", choices=("on", "off"), default="on")
    options = parser.parse_args()
    fresh_database(DATABASE_URL)
    name = DATABASE_URL.rsplit("/", 1)[1]
    admin = create_engine(DATABASE_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        mode = options.server_sync
        conn.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit = {mode}'))
    admin.dispose()
    store = JobStore(DATABASE_URL, pooled=options.prepare == "off")
    store.insert(new_row())  # connect (and compile) outside the timing
    results: dict[str, list[list[float]]] = {}
    for _ in range(options.repeat):
        for phase, took in one_run(store, options.jobs).items():
            results.setdefault(phase, []).append(took)
    store.dispose()
    print(
        f"server synchronous_commit={options.server_sync} prepare={options.prepare} "
        f"jobs={options.jobs} repeat={options.repeat} (median of the runs)"
    )
    for phase, runs in results.items():
        p50 = statistics.median(percentile(r, 50) for r in runs)
        p99 = statistics.median(percentile(r, 99) for r in runs)
        rate = statistics.median(len(r) / (sum(r) / 1e6) for r in runs)
        print(f"  {phase:<9} p50 {p50:7.0f} µs  p99 {p99:7.0f} µs  {rate:7.0f} /s")


if __name__ == "__main__":
    main()
