"""A producer process for tests/acceptance/test_durable_enqueue.py: enqueues in a loop and
appends the id of every enqueue that returned ``created=True`` to a file (one line each,
flushed at once), until a stop file appears.

    python durable_producer.py DATABASE_URL REDIS_URL OUT_PATH STOP_PATH

An enqueue that raised (the database is down) is counted on stderr and tried again.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from celery import Celery

from celery_tracked import TrackedError, tracked_task


def main(database_url: str, redis_url: str, out_path: str, stop_path: str) -> None:
    app = Celery("durable_producer", broker=redis_url, set_as_current=False)
    app.conf.tracked_database_url = database_url
    app.conf.tracked_redis_url = redis_url
    app.conf.tracked_relay_interval_seconds = 0

    @tracked_task(app=app, name="durable.job", queue="durable")
    def job(n: int) -> int:
        return n

    stop = Path(stop_path)
    failed = 0
    with open(out_path, "a", buffering=1) as out:
        n = 0
        while not stop.exists():
            n += 1
            try:
                result = job.enqueue(n=n)
            except TrackedError:
                failed += 1
                time.sleep(0.02)
                continue
            if result.created:
                out.write(f"{result.job_id}\n")
    print(f"enqueues that raised: {failed}", file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:5])
