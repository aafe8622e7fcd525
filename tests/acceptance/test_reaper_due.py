"""A job with a countdown, held by a worker whose main process is paused across two reaper
passes (issue 22, item 8): its row says it is not due yet (``not_before``, the database's
clock), so the reaper publishes nothing; the job runs once, not before its ETA. Real
workers, a real Redis broker and PostgreSQL, the reaper's thresholds at seconds."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from conftest import Env, Worker
from test_reaper import reaper_of
from test_reaper_waiting import FAST_ENV

from celery_tracked import JobStatus, Tracker
from tests.conftest import wait_for

COUNTDOWN_S = 20.0  # room for two workers to start and two passes on a loaded machine


@pytest.fixture
def reaper(env: Env) -> Iterator[Tracker]:
    """A reaper of its own (pending 1 s; a pass 1 s after the first confirms a loss)."""
    tracker = reaper_of(
        env.config, tracked_reaper_pending_seconds=1.0, tracked_reaper_interval_seconds=1
    )
    yield tracker
    tracker.close()
    tracker.app.close()


def test_a_countdown_job_whose_holder_is_paused_two_passes_is_not_published_early(
    env: Env, start_worker: Callable[..., Worker], reaper: Tracker
) -> None:
    holder = start_worker("w1", environ=FAST_ENV)
    succeed = env.task("acc.succeed").with_options(options={"countdown": COUNTDOWN_S})
    before = env.tracker._services.store.clock()
    job_id = succeed(x=1).job_id
    eta = before + timedelta(seconds=COUNTDOWN_S)  # the database's clock, at the earliest
    recorded = env.tracker.get_job(job_id).not_before  # the row's due time
    wait_for(lambda: env.unacked() and not env.broker_messages(), what="w1 to hold the job")
    start_worker("w2", environ=FAST_ENV)  # would run a published copy at once

    def handed_over_s() -> float:
        sent = env.tracker.get_job(job_id).published_at
        return (env.tracker._services.store.clock() - sent).total_seconds()

    wait_for(lambda: handed_over_s() > 1.5, what="the message to be handed over 1.5 s ago")
    os.kill(holder.proc.pid, signal.SIGSTOP)  # its main process: the ETA timer, the replies
    try:
        first = reaper.reap()  # no live worker says it holds the message
        time.sleep(1.2)  # the confirming pass's delay (tracked_reaper_interval_seconds / 2)
        second = reaper.reap()
        assert (env.tracker._services.store.clock() - eta).total_seconds() < -2, (
            "too slow: ETA reached"
        )
        for report in (first, second):
            assert report.rescued == report.abandoned == report.unpublished == []
        assert env.ran(job_id) == 0
    finally:
        os.kill(holder.proc.pid, signal.SIGCONT)
    done = env.wait_status(job_id, "completed", timeout=COUNTDOWN_S + 30)
    assert done.status is JobStatus.COMPLETED and env.ran(job_id) == 1
    [(_, started, _)] = env.spans(job_id)  # this host's clock: the database's too
    assert started >= eta.timestamp() - 0.5, f"ran {eta.timestamp() - started:.1f} s early"
    assert done.started_at is not None and (eta - done.started_at).total_seconds() < 0.5
    assert recorded is not None and 0 <= (recorded - eta).total_seconds() < 2
    names = [e.event for e in env.tracker.history(job_id)]
    assert "rescued" not in names and "missing" not in names
