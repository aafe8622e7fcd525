"""Acceptance: idempotency key lifetimes under 8 concurrent producers, debounce, and
``Tracker.retry`` (issue 7, item 6), with a real worker."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import HERE, run_producers, worker_environ
from key_tasks import DEBOUNCE_S, THROTTLE_S, burst
from tracked_app import create_app

from celery_tracked import EnqueueError, JobStatus, RetryRefused, Tracker
from celery_tracked.core.jobs import utcnow
from tests.conftest import wait_for

PRODUCERS = 8
PROCESSES = 2


def race(env: Any, task_name: str, calls: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """``calls`` enqueued at the same moment by ``PROCESSES`` processes (threads in each)."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    share = [calls[i::PROCESSES] for i in range(PROCESSES)]
    procs = [
        ctx.Process(target=burst, args=(env.config, task_name, part, barrier, results))
        for part in share
    ]
    outcomes = run_producers(procs, results)
    assert [e for _, _, e in outcomes if e] == []
    assert len(outcomes) == len(calls)
    return [(job_id, created) for job_id, created, _ in outcomes]


def rows_of(env: Any, key: str) -> list[tuple[str, int, str]]:
    return [
        (r[0], r[1], r[2])
        for r in env.sql(
            "SELECT id, key_round, status FROM background_jobs WHERE idempotency_key = :k "
            "ORDER BY key_round",
            k=key,
        )
    ]


def hand_cut_publishes_to_the_relay(env: Any) -> None:
    """Beat's SIGTERM raises ``SystemExit`` wherever Beat is, and may land between a
    tick's insert and its publish: that row waits, unpublished, for the relay (Beat's
    own relay entry, on its next start). Run that relay pass now, past the grace period."""
    later = utcnow() + timedelta(seconds=env.tracker.settings.relay_grace_seconds + 1)
    env.tracker.relay(now=later)


def one_created(outcomes: list[tuple[str, bool]]) -> str:
    """Exactly one producer created a job, and every other one got that job."""
    created = [job_id for job_id, made in outcomes if made]
    assert len(created) == 1, outcomes
    assert {job_id for job_id, _ in outcomes} == set(created)
    return created[0]


def test_row_lifetime_one_job_per_key_for_ever(env: Any, start_worker: Any) -> None:
    """The default (seed 000): one job per key while its row exists, even once ended."""
    start_worker()
    x = uuid.uuid4().hex[:8]
    first = one_created(race(env, "acc.keyed", [{"x": x}] * PRODUCERS))
    env.wait_status(first, "completed")
    again = race(env, "acc.keyed", [{"x": x}] * PRODUCERS)
    assert again == [(first, False)] * PRODUCERS
    assert len(rows_of(env, f"k:{x}")) == 1
    assert env.ran(first) == 1


def test_ended_lifetime_frees_the_key_once_the_job_ended(env: Any, start_worker: Any) -> None:
    x = uuid.uuid4().hex[:8]
    task = env.task("acc.once_at_a_time")
    first = one_created(race(env, "acc.once_at_a_time", [{"x": x}] * PRODUCERS))
    # still pending: every enqueue is the same job
    assert task.enqueue(x=x) == (first, JobStatus.PENDING, False)
    start_worker()
    env.wait_status(first, "completed")
    # the job holds for 3 s: the whole burst meets it running
    second = one_created(race(env, "acc.once_at_a_time", [{"x": x, "sleep": 3.0}] * PRODUCERS))
    assert second != first
    env.wait_status(second, "completed")
    assert rows_of(env, f"e:{x}") == [(first, 0, "completed"), (second, 1, "completed")]
    assert (env.ran(first), env.ran(second)) == (1, 1)


def test_ended_lifetime_frees_a_failed_or_cancelled_key_too(env: Any) -> None:
    x = uuid.uuid4().hex[:8]
    task = env.task("acc.once_at_a_time")
    first = task.enqueue(x=x)
    assert env.tracker.cancel(first.job_id)
    second = task.enqueue(x=x)
    assert second.created and second.job_id != first.job_id
    # the cancelled job cannot come back beside the key's newer job
    with pytest.raises(RetryRefused, match="newer job"):
        env.tracker.retry(first.job_id)
    assert env.status(first.job_id) == "cancelled"


@pytest.mark.serial  # timing-critical (spacing, windows, Beat ticks): run alone
def test_throttle_lifetime_one_job_per_window(env: Any, start_worker: Any) -> None:
    start_worker()
    x = uuid.uuid4().hex[:8]
    task = env.task("acc.throttled")
    first = one_created(race(env, "acc.throttled", [{"x": x}] * PRODUCERS))
    created = env.tracker.get_job(first).created_at
    env.wait_status(first, "completed")
    # inside the window: the same job, although it ended
    assert task.enqueue(x=x) == (first, JobStatus.COMPLETED, False)
    wait_for(
        lambda: (env.tracker._services.store.clock() - created).total_seconds() > THROTTLE_S + 0.2,
        timeout=THROTTLE_S + 5,
        what="the throttle window to pass",
    )
    second = one_created(race(env, "acc.throttled", [{"x": x, "sleep": 0.5}] * PRODUCERS))
    assert second != first
    env.wait_status(second, "completed")
    assert [r[:2] for r in rows_of(env, f"t:{x}")] == [(first, 0), (second, 1)]
    assert (env.ran(first), env.ran(second)) == (1, 1)


def test_debounce_runs_once_with_the_last_arguments(env: Any, start_worker: Any) -> None:
    """8 producers with different arguments: one row, one run, and the run had exactly the
    arguments its row says (the last replacement); 7 messages were made stale."""
    x = uuid.uuid4().hex[:8]
    start_worker()
    began = time.monotonic()
    calls = [{"x": x, "n": n} for n in range(PRODUCERS)]
    outcomes = race(env, "acc.debounced", calls)
    job_id = one_created(outcomes)
    job = env.wait_status(job_id, "completed", timeout=30)
    assert time.monotonic() - began >= DEBOUNCE_S
    assert env.ran(job_id) == 1
    payload = env.tracker.get_job(job_id).payload
    [seen] = [r.decode() for r in env.redis.lrange(f"args:{job_id}", 0, -1)]
    assert seen == repr(sorted({"x": x, "n": payload["kwargs"]["n"]}.items()))
    events = [e.event for e in env.tracker.history(job_id)]
    assert events.count("debounced") == PRODUCERS - 1
    assert job.revision == PRODUCERS - 1
    assert rows_of(env, f"d:{x}") == [(job_id, 0, "completed")]
    # the stale messages were delivered and ran nothing
    wait_for(env.broker_empty, timeout=20, what="the stale messages to be consumed")
    assert env.ran(job_id) == 1
    # once it ended, the key takes a new job
    later = env.task("acc.debounced").enqueue(x=x, n=99)
    assert later.created and later.job_id != job_id
    env.wait_status(later.job_id, "completed", timeout=30)
    assert env.tracker.wait(later.job_id)["n"] == 99


def test_debounce_without_delay_replaces_the_arguments_of_a_waiting_job(env: Any) -> None:
    """No worker yet: the job waits; a second enqueue replaces its arguments."""
    x = uuid.uuid4().hex[:8]
    task = env.task("acc.debounced")
    first = task.with_options(options={"countdown": 0})(x=x, n=1)
    second = task.with_options(options={"countdown": 0})(x=x, n=2)
    assert second == (first.job_id, JobStatus.PENDING, False)
    assert env.tracker.get_job(first.job_id).payload["kwargs"] == {"x": x, "n": 2}
    assert len(env.broker_messages()) == 2  # the first one is stale: it will run nothing


def test_tracker_retry_runs_a_failed_job_once_more(env: Any, start_worker: Any) -> None:
    start_worker()
    task = env.task("acc.fails_first")
    queued = task.enqueue(x="r1")
    job = env.wait_status(queued.job_id, "failed")
    assert job.attempts_made == 1
    assert env.tracker.retry(queued.job_id) is True
    assert env.tracker.wait(queued.job_id, timeout=30) == {
        "x": "r1",
        "run": 2,
        "token_seen": False,
    }
    job = env.tracker.get_job(queued.job_id)
    assert (job.status, job.attempts_made, job.revision) == (JobStatus.COMPLETED, 2, 1)
    events = [e.event for e in env.tracker.history(queued.job_id)]
    assert events[events.index("failed") + 1 :][:3] == ["retried", "started", "completed"]
    assert env.ran(queued.job_id) == 2
    # only failed and cancelled jobs are retried
    assert env.tracker.retry(queued.job_id) is False
    time.sleep(1)
    assert env.ran(queued.job_id) == 2


def test_tracker_retry_needs_the_redacted_values_again(env: Any, start_worker: Any) -> None:
    start_worker()
    task = env.task("acc.fails_first")
    queued = task.enqueue(x="r2", api_token="tok-9f3k")
    env.wait_status(queued.job_id, "failed")
    with pytest.raises(RetryRefused, match="api_token"):
        env.tracker.retry(queued.job_id)
    with pytest.raises(RetryRefused, match="only redacted ones"):
        env.tracker.retry(queued.job_id, arguments={"api_token": "tok-9f3k", "x": "other"})
    assert env.status(queued.job_id) == "failed"
    assert env.tracker.retry(queued.job_id, arguments={"api_token": "tok-9f3k"})
    assert env.tracker.wait(queued.job_id, timeout=30)["token_seen"] is True
    stored = env.sql("SELECT payload_json FROM background_jobs WHERE id = :i", i=queued.job_id)
    assert "tok-9f3k" not in stored[0][0]


@pytest.mark.serial  # timing-critical (spacing, windows, Beat ticks): run alone
def test_beat_entries_with_keys_follow_their_lifetime(
    env: Any, start_worker: Any, tmp_path: Path
) -> None:
    """The Beat recipe: a real ``celery beat`` ticking every 0.5 s for ~9 s. A fixed key
    under the default lifetime runs once ever; under ``ended`` runs never overlap; under a
    throttle jobs are at least the window apart."""
    entries = {
        "once-ever": {"task": "acc.keyed", "schedule": 0.5, "kwargs": {"x": "beat"}},
        "never-two": {
            "task": "acc.once_at_a_time",
            "schedule": 0.5,
            "kwargs": {"x": "beat", "sleep": 2.0},
        },
        "windowed": {"task": "acc.throttled", "schedule": 0.5, "kwargs": {"x": "beat"}},
    }
    start_worker(concurrency=4)
    log_path = tmp_path / "beat.log"
    cmd = [sys.executable, "-m", "celery", "-A", "tracked_app", "beat", "-l", "info"]
    cmd += ["-s", str(tmp_path / "beat-schedule"), "--pidfile="]
    environ = worker_environ(env.config, None, {"TRACKED_TEST_BEAT": json.dumps(entries)})
    with log_path.open("wb") as log:
        beat = subprocess.Popen(
            cmd, cwd=str(HERE), env=environ, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_for(
            lambda: log_path.read_text().count("Scheduler: Sending due task never-two") >= 16,
            timeout=30,
            what="Beat to tick 16 times",
        )
    finally:
        beat.terminate()
        beat.wait(timeout=10)
    never_two = rows_of(env, "e:beat")
    hand_cut_publishes_to_the_relay(env)
    for job_id, _, _ in never_two:
        env.wait_status(job_id, "completed", timeout=30)

    [(once, _, _)] = rows_of(env, "k:beat")
    assert env.ran(once) == 1
    assert 2 <= len(never_two) <= 5, never_two
    spans = sorted((s for job_id, _, _ in never_two for s in env.spans(job_id)), key=lambda s: s[1])
    assert all(a[2] <= b[1] for a, b in itertools.pairwise(spans)), spans
    assert all(env.ran(job_id) == 1 for job_id, _, _ in never_two)
    created = [
        r[0]
        for r in env.sql(
            "SELECT created_at FROM background_jobs WHERE idempotency_key = 't:beat' "
            "ORDER BY key_round"
        )
    ]
    assert len(created) >= 2
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(created)]
    assert all(gap >= THROTTLE_S for gap in gaps), gaps


def test_an_undone_retry_keeps_celerys_stored_result(
    env: Any, start_worker: Any, redis_url: str
) -> None:
    """The broker refuses the retry's message: the job is failed again, and the result
    backend still holds the old FAILURE (``AsyncResult.get()`` must not wait for ever)."""
    backend = {"TRACKED_TEST_RESULT_BACKEND": redis_url}
    start_worker(environ=backend)
    app = create_app({**env.config, "result_backend": redis_url})
    queued = app.tasks["acc.fails_first"].enqueue(x="r3")
    env.wait_status(queued.job_id, "failed")
    wait_for(lambda: app.AsyncResult(queued.job_id).state == "FAILURE", timeout=10)
    broken = create_app(
        {**env.config, "broker": "redis://127.0.0.1:1/0", "result_backend": redis_url}
    )
    broken.conf.broker_connection_timeout = 0.5
    broken.conf.broker_transport_options = {"max_retries": 0}
    try:
        with pytest.raises(EnqueueError, match="broker publish"):
            Tracker.for_app(broken).retry(queued.job_id)
        assert env.status(queued.job_id) == "failed"
        assert app.AsyncResult(queued.job_id).state == "FAILURE"
        events = [e.event for e in env.tracker.history(queued.job_id)]
        assert events[-2:] == ["retried", "retry_undone"]
    finally:
        Tracker.for_app(broken).close()
        Tracker.for_app(app).close()
        broken.close()
        app.close()
