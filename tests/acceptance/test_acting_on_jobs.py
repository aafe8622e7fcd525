"""Acceptance: acting on jobs (issue 13, item 4) with real workers and the real ``celery``
executable: bulk retry of 100 failed jobs and bulk cancel of 100 pending ones through the
CLI; a running job cancelled with ``running=True`` ends ``cancelled`` and its body stops,
under prefork (terminated), threads and solo (the body's ``self.cancelled()``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tracked_app import QUEUE

from celery_tracked import JobStatus
from celery_tracked.services.lease import process_alive
from tests.conftest import wait_for


def count(env: Any, status: str, task: str) -> int:
    rows = env.sql(
        "SELECT count(*) FROM background_jobs WHERE status = :s AND task_name = :t",
        s=status,
        t=task,
    )
    return int(rows[0][0])


def events_of(env: Any, job_id: str) -> list[str]:
    return [e.event for e in env.tracker.history(job_id)]


def test_bulk_retry_of_100_failed_jobs_through_the_cli_runs_each_once_more(
    env: Any, start_worker: Any, run_cli: Any
) -> None:
    flaky = env.task("acc.flaky")  # run 1 fails, later runs succeed
    ids = [flaky.enqueue(x=n, _max_attempts=1).job_id for n in range(100)]
    start_worker()
    wait_for(lambda: count(env, "failed", "acc.flaky") == 100, timeout=90, what="100 failed")
    assert {env.ran(i) for i in ids} == {1}

    out = run_cli("retry", "--status", "failed", "--job-type", "acc.flaky", "--json")

    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert set(report) == {"action", "matched", "changed", "refused", "skipped", "more"}
    assert report["action"] == "retry" and report["matched"] == 100
    assert sorted(report["changed"]) == sorted(ids)
    assert report["refused"] == {} and report["more"] is False
    wait_for(lambda: count(env, "completed", "acc.flaky") == 100, timeout=90, what="100 done")
    wait_for(env.broker_empty, timeout=20, what="the broker to be empty")
    assert {env.ran(i) for i in ids} == {2}  # each retried job ran exactly once more
    for job_id in ids[:5]:
        assert events_of(env, job_id)[-4:] == ["failed", "retried", "started", "completed"]
        assert env.tracker.get_job(job_id).result["run"] == 2

    again = run_cli("retry", "--status", "failed", "--job-type", "acc.flaky")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("retried 0 of 0 matching job(s)")


def test_bulk_cancel_of_100_pending_jobs_through_the_cli_and_none_runs(
    env: Any, start_worker: Any, run_cli: Any
) -> None:
    succeed = env.task("acc.succeed")
    ids = [succeed.enqueue(x=n).job_id for n in range(100)]  # no worker yet: all pending

    first = run_cli("cancel", "--job-type", "acc.succeed", "--limit", "60", "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert len(report["changed"]) == 60 and report["more"] is True
    assert report["changed"] == ids[::-1][:60]  # newest first
    rest = run_cli("cancel", "--status", "pending", "--queue", QUEUE, "--reason", "maintenance")
    assert rest.returncode == 0, rest.stderr
    assert rest.stdout.splitlines()[0] == "cancelled 40 of 40 matching job(s)"

    assert count(env, "cancelled", "acc.succeed") == 100
    job = env.tracker.get_job(ids[0])
    assert job.error_message == "maintenance" and job.finished_at is not None
    start_worker()
    wait_for(env.broker_empty, timeout=60, what="the 100 messages to be consumed")
    assert {env.ran(i) for i in ids} == {0}  # cancelled: no body ran
    assert count(env, "cancelled", "acc.succeed") == 100


def test_a_running_job_cancelled_with_running_is_terminated_under_prefork(
    env: Any, start_worker: Any, run_cli: Any
) -> None:
    start_worker()
    job_id = env.task("acc.stoppable").enqueue(poll=False, seconds=60).job_id
    pid = int(wait_for(lambda: env.redis.get(f"holding:{job_id}"), timeout=20, what="the body"))
    assert env.status(job_id) == "processing"

    out = run_cli("cancel", job_id, "--running", "--json")

    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["changed"] == [job_id]
    job = env.wait_status(job_id, "cancelled", "completed", "failed", timeout=30)
    assert job.status is JobStatus.CANCELLED, env.diagnose(job_id)
    wait_for(lambda: not process_alive(pid), timeout=10, what="the pool child to be gone")
    assert env.spans(job_id) == []  # the body never reached its end
    assert events_of(env, job_id)[-2:] == ["cancel_requested", "cancelled"]
    assert job.cancel_requested_at is not None and job.locked_by is None
    wait_for(env.broker_empty, timeout=20, what="the broker to be empty")
    assert env.ran(job_id) == 1

    # not revoked in the worker: the job can run again
    retried = run_cli("retry", job_id)
    assert retried.returncode == 0, retried.stderr + retried.stdout
    job = env.wait_status(job_id, "completed", "cancelled", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED, env.diagnose(job_id)
    assert job.result == {"run": 2} and env.ran(job_id) == 2


@pytest.mark.parametrize("pool", ["threads", "solo"])
def test_a_running_job_cancelled_with_running_stops_its_polling_body(
    env: Any, start_worker: Any, pool: str
) -> None:
    worker = start_worker(pool=pool)
    job_id = env.task("acc.stoppable").enqueue(poll=True, seconds=60).job_id
    wait_for(lambda: env.redis.get(f"holding:{job_id}"), timeout=20, what="the body to run")

    assert env.tracker.cancel(job_id, "operator", running=True) is True

    job = env.wait_status(job_id, "cancelled", "completed", "failed", timeout=30)
    assert job.status is JobStatus.CANCELLED, env.diagnose(job_id)
    assert env.redis.get(f"stopped:{job_id}") == b"1"  # self.cancelled() stopped it
    assert len(env.spans(job_id)) == 1 and env.ran(job_id) == 1
    assert job.result_json is None
    assert events_of(env, job_id)[-2:] == ["cancel_requested", "cancelled"]
    assert worker.proc.poll() is None  # the worker itself runs on
    wait_for(env.broker_empty, timeout=20, what="the broker to be empty")


def test_under_threads_a_body_that_never_asks_runs_to_its_end_and_the_job_is_cancelled(
    env: Any, start_worker: Any
) -> None:
    start_worker(pool="threads")
    job_id = env.task("acc.stoppable").enqueue(poll=False, seconds=2).job_id
    wait_for(lambda: env.redis.get(f"holding:{job_id}"), timeout=20, what="the body to run")

    assert env.tracker.cancel(job_id, running=True) is True
    assert env.status(job_id) == "processing"  # while its run goes on

    job = env.wait_status(job_id, "cancelled", "completed", "failed", timeout=30)
    assert job.status is JobStatus.CANCELLED, env.diagnose(job_id)
    assert len(env.spans(job_id)) == 1  # it ran to its end: threads cannot be terminated
    assert job.result_json is None  # its result was dropped
    assert "cancelled while running" in (job.error_message or "")
