"""Acceptance (issue 13, item 1): a real ``celery beat`` with a short schedule and a real
worker run the default entries of the cleanup, the relay and the reaper, and a user's own
entry, all four;
the cleanup removes old ended rows with their events and guard entries, nothing else."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import create_engine, insert
from sqlalchemy.pool import NullPool
from tracked_app import QUEUE

from celery_tracked.core.jobs import utcnow
from celery_tracked.store.models import events, jobs
from tests.conftest import wait_for

USER_ENTRY = {"my-own-entry": {"task": "acc.succeed", "schedule": 1.0, "kwargs": {"x": "mine"}}}
FAST = {
    "CELERY_TRACKED_CLEANUP_SCHEDULE": "2",
    "CELERY_TRACKED_RELAY_GRACE_SECONDS": "1",
    "CELERY_TRACKED_RELAY_INTERVAL_SECONDS": "1",
    "CELERY_TRACKED_REAPER_INTERVAL_SECONDS": "1",
    "CELERY_TRACKED_REAPER_PENDING_SECONDS": "1",
    "TRACKED_TEST_BEAT": json.dumps(USER_ENTRY),
}


def seed(database_url: str, rows: list[dict[str, Any]], per_job: int = 3) -> list[str]:
    """Insert ``rows`` (over the defaults below), each with ``per_job`` events."""
    now = utcnow()
    full = []
    for values in rows:
        job_id = str(uuid.uuid4())
        full.append(
            {
                "id": job_id,
                "queue_name": QUEUE,
                "job_type": "acc.succeed",
                "task_name": "acc.succeed",
                "celery_task_id": job_id,
                "status": "completed",
                "payload_json": '{"args": [], "kwargs": {"x": "old"}}',
                "max_attempts": 3,
                "attempts_made": 1,
                "correlation_id": job_id,
                "idempotency_key": None,
                "finished_at": None,
                "created_at": now,
                "updated_at": now,
                "published_at": now,
                **values,
            }
        )
    history = [
        {"job_id": r["id"], "event": "e", "status": r["status"], "created_at": now}
        for r in full
        for _ in range(per_job)
    ]
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(insert(jobs), full)
            if history:
                conn.execute(insert(events), history)
    finally:
        engine.dispose()
    return [r["id"] for r in full]


def test_beat_runs_the_cleanup_the_relay_the_reaper_and_the_users_own_entry(
    env: Any, start_worker: Any, start_beat: Any
) -> None:
    now = utcnow()
    old = now - timedelta(days=10)
    removed = seed(
        env.database_url,
        [
            {"finished_at": old - timedelta(seconds=i), "idempotency_key": f"old-{i}"}
            for i in range(30)
        ]
        + [{"status": "failed", "finished_at": now - timedelta(days=31)} for _ in range(3)],
    )
    kept = seed(env.database_url, [{"finished_at": now - timedelta(days=1)} for _ in range(4)])
    kept += seed(env.database_url, [{"status": "failed", "finished_at": old} for _ in range(2)])
    kept += seed(env.database_url, [{"status": "retrying", "finished_at": None}])
    # a producer that died before publishing: the relay's
    [orphan] = seed(
        env.database_url,
        [
            {
                "status": "pending",
                "payload_json": '{"args": [], "kwargs": {"x": "orphan"}}',
                "published_at": None,
                "created_at": now - timedelta(minutes=5),
            }
        ],
        per_job=1,
    )
    # a job handed to a broker that lost its message an hour ago: the reaper's
    [lost] = seed(
        env.database_url,
        [
            {
                "status": "pending",
                "payload_json": '{"args": [], "kwargs": {"x": "lost"}}',
                "published_at": now - timedelta(hours=1),
                "created_at": now - timedelta(hours=1),
            }
        ],
        per_job=1,
    )
    for i in range(30):  # the guard entries of the removed keys (as their enqueue left them)
        env.redis.set(f"celery_tracked:guard:acc.succeed:old-{i}", removed[i])
    env.redis.set("celery_tracked:guard:acc.succeed:live", kept[0])

    worker = start_worker(environ=FAST)
    beat_log = start_beat(FAST)

    def count(where: str) -> int:
        return int(env.sql(f"SELECT count(*) FROM background_jobs WHERE {where}")[0][0])

    ids = ", ".join(f"'{i}'" for i in removed)
    wait_for(lambda: count(f"id IN ({ids})") == 0, timeout=45, what="the cleanup")
    env.wait_status(orphan, "completed", timeout=45)
    assert "relayed" in [e.event for e in env.tracker.history(orphan)]
    env.wait_status(lost, "completed", timeout=45)
    assert "rescued" in [e.event for e in env.tracker.history(lost)]
    assert env.ran(lost) == 1
    wait_for(
        lambda: count("status = 'completed' AND payload_json LIKE '%mine%'") >= 2,
        timeout=30,
        what="two runs of the user's own entry",
    )
    log = worker.log()
    for task in ("celery_tracked.cleanup[", "celery_tracked.relay[", "celery_tracked.reap["):
        assert task in log, task
    assert "cleanup removed 33 jobs (completed 30, failed 3, cancelled 0), 99 events" in log
    beat = beat_log.read_text()
    for entry in ("celery_tracked.cleanup", "celery_tracked.relay", "celery_tracked.reap"):
        assert f"Sending due task {entry}" in beat, entry
    for entry in ("my-own-entry",):
        assert f"Sending due task {entry}" in beat, entry
    remaining = {r[0] for r in env.sql("SELECT id FROM background_jobs")}
    assert set(kept) <= remaining, "recent and active rows untouched"
    assert not env.sql(f"SELECT id FROM background_job_events WHERE job_id IN ({ids})")
    assert not env.redis.keys("celery_tracked:guard:acc.succeed:old-*")
    assert env.redis.get("celery_tracked:guard:acc.succeed:live") == kept[0].encode()
