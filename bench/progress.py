"""Progress benchmark: 10,000 ``self.set_progress`` calls in one tracked body.

    python bench/progress.py [--calls 10000] [--repeat 3]

The body runs in this process through ``apply()``: the same ``Runner`` as a worker (real
claim under a lease, every progress write fenced and sent to a real PostgreSQL), without
a broker. For each case it prints the seconds the body's loop took, the cost per call and
how many progress writes reached the database. Not a test: see ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from celery import Celery  # noqa: E402

from bench.run import fresh_database  # noqa: E402
from celery_tracked import Tracker, tracked_task  # noqa: E402
from celery_tracked.store import JobStore  # noqa: E402

DATABASE_URL = os.environ.get(
    "BENCH_PROGRESS_DATABASE_URL",
    "postgresql+psycopg://postgres@127.0.0.1:5432/ct_bench_progress",
)


def make_app(interval_ms: int) -> Celery:
    app = Celery(f"bench_progress_{interval_ms}", broker="memory://", set_as_current=False)
    app.conf.update(
        tracked_database_url=DATABASE_URL,
        tracked_redis_url="memory://",
        tracked_progress_interval_ms=interval_ms,
        task_always_eager=True,
        task_eager_propagates=True,
    )

    @tracked_task(app=app, bind=True, shared=False, name="bench.progress")
    def progress(self: Any, calls: int, style: str) -> float:
        started = time.perf_counter()
        if style == "set_progress":
            for n in range(calls):
                self.set_progress(n * 100 / calls, "loop" if n == 0 else None)
        else:  # existing Celery code, unchanged
            for n in range(calls):
                self.update_state(state="PROGRESS", meta={"current": n, "total": calls})
        return time.perf_counter() - started

    return app


def measure(interval_ms: int, calls: int, style: str, repeat: int) -> dict[str, Any]:
    app = make_app(interval_ms)
    writes = 0
    report = JobStore.report_progress

    def counted(self: JobStore, *args: Any, **kwargs: Any) -> bool:
        nonlocal writes
        writes += 1
        return report(self, *args, **kwargs)

    JobStore.report_progress = counted  # type: ignore[method-assign]
    try:
        task = app.tasks["bench.progress"]
        task.apply(args=(10, style)).get()  # warm up: connections, compiled statements
        writes = 0
        seconds = [float(task.apply(args=(calls, style)).get()) for _ in range(repeat)]
    finally:
        JobStore.report_progress = report  # type: ignore[method-assign]
        Tracker.for_app(app).close()
        app.close()
    median = statistics.median(seconds)
    return {
        "case": f"{style}, interval {interval_ms} ms",
        "calls": calls,
        "seconds": median,
        "us_per_call": median / calls * 1e6,
        "writes_per_body": writes / repeat,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    fresh_database(DATABASE_URL)
    rows = [
        measure(500, args.calls, "set_progress", args.repeat),
        measure(500, args.calls, "update_state", args.repeat),
        # every call a write: what coalescing saves (fewer calls: it is slow)
        measure(0, max(1, args.calls // 10), "set_progress", args.repeat),
    ]
    print(f"{'case':<32} {'calls':>7} {'seconds':>9} {'µs/call':>9} {'writes/body':>12}")
    for row in rows:
        print(
            f"{row['case']:<32} {row['calls']:>7} {row['seconds']:>9.4f} "
            f"{row['us_per_call']:>9.1f} {row['writes_per_body']:>12.1f}"
        )


if __name__ == "__main__":
    main()
