"""The reaper and jobs that only wait their turn (issue 22, items 0 and 8), with real workers,
Beat, a real Redis broker and PostgreSQL, at compressed reaper thresholds.

- A backlog behind ``rate_limit_global`` and behind a full concurrency key: its deliveries
  move between the queue and the workers' timers again and again; none of these jobs may be
  rescued or abandoned, and each runs once.
- A job with a countdown held by a worker whose main process is paused past the reaper's
  ``query_task`` reply: one pass that does not find its message rescues nothing; the job
  runs once, never before its ETA.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import Env, Worker
from test_reaper import reaper_of

from celery_tracked import JobStatus, Tracker
from tests.conftest import wait_for

#: The reaper's thresholds squeezed to seconds (the defaults are minutes), and Beat's pass
#: every 2 s: a job waiting its turn for longer than 4 s looks stalled by its row (the
#: backlog waits up to 10 s), so every pass asks the workers whether they hold it.
FAST = {
    "tracked_reaper_pending_seconds": 4,
    "tracked_reaper_retrying_seconds": 4,
    "tracked_reaper_processing_seconds": 4,
    "tracked_reaper_interval_seconds": 2,
    "tracked_reaper_max_rescues": 1,  # a second rescue abandons: shown at once
}
FAST_ENV = {f"CELERY_TRACKED_{k.removeprefix('tracked_').upper()}": str(v) for k, v in FAST.items()}


#: the backlog: jobs 1 s apart behind the limiter, and jobs of one key (one at a time)
N_LIMITED = int(os.environ.get("TEST_REAPER_LIMITED", "10"))
N_KEYED = int(os.environ.get("TEST_REAPER_KEYED", "20"))
KEYED_S = float(os.environ.get("TEST_REAPER_KEYED_S", "0.5"))


def events_of(env: Env, job_ids: list[str], *names: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for job_id in job_ids:
        found = [e.event for e in env.tracker.history(job_id) if e.event in names]
        if found:
            out[job_id] = found
    return out


@pytest.fixture
def fleet(env: Env, start_worker: Callable[..., Worker], start_beat: Any) -> Iterator[None]:
    """Two prefork workers and Beat (the reaper every second), at the fast thresholds."""
    start_worker("w1", concurrency=2, environ=FAST_ENV)
    start_worker("w2", concurrency=2, environ=FAST_ENV)
    start_beat(FAST_ENV)
    yield


# serial: the holders must answer the reaper's query (a main process starved of CPU for two
# passes in a row is a paused holder, docs/operations.md "Limits")
@pytest.mark.serial
def test_a_backlog_behind_a_rate_limit_and_a_full_key_is_never_rescued(
    env: Env, fleet: None
) -> None:
    limited = [env.task("acc.limited_slow").enqueue(n=i).job_id for i in range(N_LIMITED)]
    one = env.task("acc.one_per_group")
    keyed = [one.enqueue(group="g", n=i, sleep=KEYED_S).job_id for i in range(N_KEYED)]
    jobs = limited + keyed
    try:
        wait_for(
            lambda: all(env.status(j) in ("completed", "failed") for j in jobs),
            timeout=90,
            interval=0.5,
            what="the backlog to drain",
        )
    finally:
        touched = events_of(env, jobs, "rescued", "failed")
    assert touched == {}, f"waiting jobs rescued or abandoned: {touched}"
    assert [env.status(j) for j in jobs] == ["completed"] * len(jobs)
    assert {j: env.ran(j) for j in jobs} == dict.fromkeys(jobs, 1)
    # the reaper did look at them: they waited longer than its pending threshold
    waited = env.sql(
        "SELECT count(*) FROM background_jobs WHERE started_at > created_at + interval '3 s'"
    )[0][0]
    assert waited >= 10


@pytest.fixture
def reaper(env: Env) -> Iterator[Tracker]:
    """A reaper of its own, as a Beat-run one would be (pending 1 s)."""
    tracker = reaper_of(env.config, tracked_reaper_pending_seconds=1.0)
    yield tracker
    tracker.close()
    tracker.app.close()


def test_a_countdown_job_whose_holder_is_paused_is_not_rescued_on_one_pass(
    env: Env, start_worker: Callable[..., Worker], reaper: Tracker
) -> None:
    holder = start_worker("w1", environ=FAST_ENV)
    countdown = 25.0  # room for two workers to start on a loaded machine
    enqueued = time.time()
    job_id = env.task("acc.succeed").with_options(options={"countdown": countdown})(x=1).job_id
    wait_for(lambda: env.unacked() and not env.broker_messages(), what="w1 to hold the job")
    start_worker("w2", environ=FAST_ENV)  # would run a rescued copy at once
    wait_for(
        lambda: (
            (
                env.tracker._services.store.clock() - env.tracker.get_job(job_id).published_at
            ).total_seconds()
            > 1.5
        ),
        what="the job to look stalled",
    )
    assert time.time() < enqueued + countdown - 8, "too slow to test before the ETA"
    os.kill(holder.proc.pid, signal.SIGSTOP)  # its main process: the ETA timer, the replies
    try:
        report = reaper.reap()  # its query_task would find no holder, but the row says
        # the job is not due yet (its countdown, ``not_before``): not looked at at all
        assert report.rescued == [] and report.abandoned == [] and job_id not in report.left
        assert "missing" not in [e.event for e in env.tracker.history(job_id)]
        time.sleep(1.0)
        assert env.ran(job_id) == 0
    finally:
        os.kill(holder.proc.pid, signal.SIGCONT)
    report = reaper.reap()  # the holder answers again (or the job started meanwhile)
    assert report.rescued == [] and report.abandoned == []
    job = env.wait_status(job_id, "completed", timeout=30)
    assert job.status is JobStatus.COMPLETED and env.ran(job_id) == 1
    [(_, started, _)] = env.spans(job_id)
    assert started >= enqueued + countdown - 0.5, (
        f"ran {enqueued + countdown - started:.1f} s early"
    )
    assert [e.event for e in env.tracker.history(job_id)].count("rescued") == 0


def test_a_job_waiting_its_slot_in_a_killed_worker_is_still_rescued(
    env: Env, start_worker: Callable[..., Worker], reaper: Tracker
) -> None:
    """The fault the sign of life must not hide: the worker holding a rate-limited job in
    its timer is killed (SIGKILL, whole group; Redis keeps the message unacked for an
    hour). No delivery refreshes the row any more: two passes rescue it, and it runs once."""
    doomed = start_worker("w1", environ=FAST_ENV)
    limited = env.task("acc.limited_slow")
    jobs = [limited.enqueue(n=i).job_id for i in range(4)]  # the last waits ~3 s for its slot
    wait_for(lambda: len(env.unacked()) == 4, what="w1 to hold every message")
    os.killpg(doomed.proc.pid, signal.SIGKILL)
    doomed.proc.wait(timeout=10)
    waiting = [j for j in jobs if env.status(j) == "pending"]
    assert waiting, "every job ran before the kill"
    rescued: set[str] = set()

    def rescued_all() -> bool:
        rescued.update(reaper.reap().rescued)
        return rescued >= set(waiting)

    wait_for(rescued_all, timeout=60, interval=0.5, what="the waiting jobs to be rescued")
    start_worker("w2", environ=FAST_ENV)
    for job_id in jobs:
        env.wait_status(job_id, "completed", timeout=30)
    assert {j: env.ran(j) for j in jobs} == dict.fromkeys(jobs, 1)
    for job_id in waiting:
        names = [e.event for e in env.tracker.history(job_id)]
        assert names.count("rescued") == 1 and names.index("missing") < names.index("rescued")
