"""`make demo`: one tracked job end to end on the embedded default.

SQLite for the tracking tables, the in-memory broker, the in-process guard
(``tracked_redis_url = "memory://"``) and an in-process worker thread: nothing to install
or start. Prints the job's row and its history.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from celery import Celery
from celery.contrib.testing.worker import start_worker

from celery_tracked import Tracker, tracked_task
from celery_tracked.store import migrate

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / ".demo"
DATA.mkdir(exist_ok=True)
DB = DATA / "demo.sqlite3"
DB.unlink(missing_ok=True)

app = Celery("demo", broker="memory://")
app.conf.tracked_database_url = f"sqlite:///{DB}"
app.conf.tracked_redis_url = "memory://"  # the in-process guard: embedded mode only
app.conf.tracked_default_backoff_ms = 200

calls = {"n": 0}


@tracked_task(app=app, queue="ocr_queue", job_type="ocr", idempotency_key="ocr:{document_id}")
def ocr_document(document_id: str, api_token: str) -> dict[str, object]:
    """Fails once (a flaky dependency), then succeeds: shows a retry in the history."""
    calls["n"] += 1
    if calls["n"] == 1:
        raise ConnectionError(f"OCR service timed out (token {api_token})")
    return {"document_id": document_id, "pages": 3}


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("celery").setLevel(logging.WARNING)
    migrate.upgrade(app.conf.tracked_database_url)
    tracker = Tracker.for_app(app)

    worker = start_worker(
        app, pool="solo", perform_ping_check=False, loglevel="WARNING", queues=["ocr_queue"]
    )
    with worker:
        first = ocr_document.enqueue(document_id="doc-1", api_token="s3cr3t-token")
        again = ocr_document.enqueue(document_id="doc-1", api_token="s3cr3t-token")
        print(f"\nenqueued {first.job_id} ({first.status}, created={first.created})")
        print(f"same key again -> {again.job_id} (created={again.created})")
        result = tracker.wait(first.job_id, timeout=30)

    job = tracker.get_job(first.job_id)
    assert job is not None
    print(f"\nresult: {json.dumps(result)}")
    print("\nrow:")
    for name in (
        "id",
        "queue_name",
        "job_type",
        "status",
        "attempts_made",
        "max_attempts",
        "idempotency_key",
        "error_type",
        "error_message",
        "created_at",
        "started_at",
        "finished_at",
    ):
        print(f"  {name:<16} {getattr(job, name)}")
    print(f"  {'payload_json':<16} {job.payload_json}")
    print(f"  {'result_json':<16} {job.result_json}")
    print("\nhistory:")
    for event in tracker.history(first.job_id):
        print(
            f"  {event.created_at:%H:%M:%S.%f}  {event.event:<10} {event.status.value:<10}"
            f" attempt={event.attempt} {event.message or ''}"
        )
    ok = job.status.value == "completed" and job.attempts_made == 2 and not again.created
    print("\ndemo OK" if ok else "\ndemo FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
