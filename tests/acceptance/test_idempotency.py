"""Acceptance: idempotency, duplicate delivery, two workers (FEAT-33-08, FEAT-33-13)."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from typing import Any

from conftest import run_producers
from tracked_app import enqueue_storm

from celery_tracked import JobStatus
from tests.conftest import wait_for


def test_feat_33_08_same_key_twice_is_one_job_one_message_one_run(
    env: Any, start_worker: Any
) -> None:
    task = env.task("acc.keyed")
    first = task.enqueue(x="doc-8")
    second = task.enqueue(x="doc-8")

    assert first.created is True
    assert second.created is False
    assert second.job_id == first.job_id
    assert second.status is JobStatus.PENDING
    rows = env.sql("SELECT id FROM background_jobs WHERE idempotency_key = 'k:doc-8'")
    assert [r[0] for r in rows] == [first.job_id]
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 1
    messages = env.broker_messages()
    assert [m["headers"]["id"] for m in messages] == [first.job_id]

    start_worker()
    job = env.wait_status(first.job_id, "completed", timeout=30)
    assert job.attempts_made == 1
    # a third enqueue after completion is still the same job, and runs nothing
    third = task.enqueue(x="doc-8")
    assert third == (first.job_id, JobStatus.COMPLETED, False)
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(first.job_id) == 1
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 1


def test_feat_33_08_fifty_concurrent_enqueues_of_one_key(env: Any, start_worker: Any) -> None:
    """5 processes x 10 threads enqueue one key at the same moment: one job, one run."""
    processes, threads = 5, 10
    key = f"storm-{uuid.uuid4().hex[:8]}"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=enqueue_storm, args=(env.config, key, threads, barrier, results))
        for _ in range(processes)
    ]
    outcomes = run_producers(procs, results)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]

    assert len(outcomes) == processes * threads
    errors = [e for _, _, e in outcomes if e]
    assert errors == []
    job_ids = {job_id for job_id, _, _ in outcomes}
    assert len(job_ids) == 1
    [job_id] = job_ids
    assert sum(1 for _, created, _ in outcomes if created) == 1
    rows = env.sql("SELECT id FROM background_jobs WHERE idempotency_key = :k", k=f"k:{key}")
    assert [r[0] for r in rows] == [job_id]
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 1
    assert [m["headers"]["id"] for m in env.broker_messages()] == [job_id]

    start_worker()
    env.wait_status(job_id, "completed", timeout=30)
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 1


def test_feat_33_13_two_workers_500_jobs_each_run_exactly_once(env: Any, start_worker: Any) -> None:
    total = 500
    w1 = start_worker("w1", ready=False)
    w2 = start_worker("w2", ready=False)
    for w in (w1, w2):
        wait_for(lambda w=w: " ready." in w.log(), timeout=30, what=f"{w.name} ready")

    task = env.task("acc.succeed")
    job_ids = [task.enqueue(x=i).job_id for i in range(total)]
    assert len(set(job_ids)) == total

    def completed() -> int:
        return int(env.sql("SELECT count(*) FROM background_jobs WHERE status = 'completed'")[0][0])

    wait_for(lambda: completed() == total, timeout=120, interval=0.5, what="500 completions")

    statuses = env.sql("SELECT status, attempts_made, count(*) FROM background_jobs GROUP BY 1, 2")
    assert [tuple(r) for r in statuses] == [("completed", 1, total)]
    runs = env.redis.mget([f"ran:{j}" for j in job_ids])
    assert [int(r or 0) for r in runs] == [1] * total
    events = env.sql("SELECT event, count(*) FROM background_job_events GROUP BY 1 ORDER BY 1")
    assert dict((e, n) for e, n in events) == {
        "completed": total,
        "enqueued": total,
        "started": total,
    }
    workers = {r[0].split("@")[0] for r in env.sql("SELECT DISTINCT worker FROM background_jobs")}
    assert workers == {"w1", "w2"}


def test_duplicate_delivery_never_runs_concurrently_nor_after_completion(
    env: Any, start_worker: Any
) -> None:
    worker = start_worker()
    job_id = env.task("acc.hold").enqueue(x="dup").job_id
    wait_for(lambda: env.redis.exists(f"holding:{job_id}"), timeout=20, what="run 1 to start")

    # the same message again while run 1 is still running: postponed, not run
    env.redeliver("acc.hold", job_id, x="dup")
    wait_for(lambda: worker.records_of(job_id, "busy"), timeout=20, what="the duplicate postponed")
    assert env.ran(job_id) == 1
    assert env.status(job_id) == "processing"

    env.redis.set(f"go:{job_id}", 1)
    job = env.wait_status(job_id, "completed", timeout=20)
    # the postponed duplicate comes back after completion and is skipped
    wait_for(
        lambda: worker.records_of(job_id, "skipped"),
        timeout=20,
        what="the postponed duplicate to be skipped",
    )
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 1
    assert len(env.spans(job_id)) == 1
    assert job.attempts_made == 1

    # delivered again after completion: the body does not run, the row is unchanged
    before = env.tracker.get_job(job_id)
    history_before = env.tracker.history(job_id)
    skipped_before = len(worker.records_of(job_id, "skipped"))
    env.redeliver("acc.hold", job_id, x="dup")
    wait_for(
        lambda: len(worker.records_of(job_id, "skipped")) > skipped_before,
        timeout=20,
        what="the late duplicate to be skipped",
    )
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 1
    assert env.tracker.get_job(job_id) == before
    assert env.tracker.history(job_id) == history_before


def test_duplicate_delivery_while_the_body_outlives_its_lease_does_not_run(
    env: Any, start_worker: Any
) -> None:
    """The running attempt renews its lease: a duplicate checked again and again, well
    after the first lease period, is still postponed, never run, never a takeover."""
    lease = env.config["lease_seconds"]
    worker = start_worker()
    job_id = env.task("acc.hold").enqueue(x="long").job_id
    wait_for(lambda: env.redis.exists(f"holding:{job_id}"), timeout=20, what="run 1 to start")
    held_since = time.monotonic()
    first_lease = env.tracker.get_job(job_id).locked_until

    env.redeliver("acc.hold", job_id, x="long")
    wait_for(
        lambda: (
            len(worker.records_of(job_id, "busy")) >= 3
            and time.monotonic() - held_since > 1.5 * lease
        ),
        timeout=30,
        what="the duplicate to be postponed 3 times",
    )
    job = env.tracker.get_job(job_id)
    assert job.status is JobStatus.PROCESSING
    assert job.attempts_made == 1
    assert job.locked_until > first_lease  # renewed
    assert env.ran(job_id) == 1

    env.redis.set(f"go:{job_id}", 1)
    job = env.wait_status(job_id, "completed", "failed", timeout=20)
    wait_for(
        lambda: worker.records_of(job_id, "skipped"),
        timeout=20,
        what="the postponed duplicate to be skipped",
    )
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert job.status is JobStatus.COMPLETED
    assert job.attempts_made == 1
    assert env.ran(job_id) == 1
    assert [e.event for e in env.tracker.history(job_id)] == ["enqueued", "started", "completed"]
