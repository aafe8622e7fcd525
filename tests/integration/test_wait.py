"""Tracker.wait: subscribe first, read the row, woken by the terminal notification."""

from __future__ import annotations

import threading
import time

import pytest

from celery_tracked import JobFailed, JobNotFound, Tracker, WaitTimeout, tracked_task
from celery_tracked.core.fences import AttemptError, Completion, Lease
from celery_tracked.core.jobs import utcnow

from ..conftest import wait_for
from .conftest import AppFactory, tracker_of


def finish_later(app: object, job_id: str, ok: bool) -> threading.Thread:
    tracker = tracker_of(app)  # type: ignore[arg-type]

    def run() -> None:
        # the waiter must already be subscribed when the job ends
        channel = tracker._services.backend.key("job", job_id)
        client = tracker._services.backend.client  # type: ignore[union-attr]
        wait_for(lambda: client.pubsub_numsub(channel)[0][1] > 0, what="a subscriber")
        claim = tracker._services.store.claim(
            job_id, Lease(owner="h:1", worker="w", now=utcnow(), lease_s=30)
        )
        assert claim is not None
        if ok:
            tracker._services.store.complete(
                claim, Completion(result_json='{"pages": 3}', now=utcnow(), duration_ms=1)
            )
        else:
            tracker._services.store.fail(
                claim,
                AttemptError(
                    error_type="ValueError", error_message="bad", duration_ms=1, now=utcnow()
                ),
            )
        tracker._services.notifier.publish(job_id, "done")

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_wait_returns_the_result_when_notified(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Tracker, "REREAD_S", 30.0)  # only the notification can wake it early
    app = make_app()

    @tracked_task(app=app, queue="q")
    def work() -> None: ...

    job_id = work.enqueue().job_id
    thread = finish_later(app, job_id, ok=True)
    started = time.monotonic()
    assert tracker_of(app).wait(job_id, timeout=10) == {"pages": 3}
    assert time.monotonic() - started < 4, "woken by the notification, not by the re-read cap"
    thread.join()


def test_wait_raises_job_failed(make_app: AppFactory) -> None:
    app = make_app()

    @tracked_task(app=app, queue="q")
    def work() -> None: ...

    job_id = work.enqueue().job_id
    thread = finish_later(app, job_id, ok=False)
    with pytest.raises(JobFailed) as info:
        tracker_of(app).wait(job_id, timeout=10)
    assert info.value.job.error_type == "ValueError"
    thread.join()


def test_wait_timeout_and_unknown_job(make_app: AppFactory) -> None:
    app = make_app()

    @tracked_task(app=app, queue="q")
    def work() -> None: ...

    job_id = work.enqueue().job_id
    with pytest.raises(WaitTimeout):
        tracker_of(app).wait(job_id, timeout=0.2)
    with pytest.raises(JobNotFound):
        tracker_of(app).wait("no-such-job", timeout=0.2)


def test_stats_counts_per_queue_and_status(make_app: AppFactory) -> None:
    app = make_app()

    @tracked_task(app=app, queue="q1")
    def work(n: int) -> None: ...

    for n in range(3):
        work.enqueue(n)
    stats = tracker_of(app).stats()
    assert stats["q1"]["counts"]["pending"] == 3
    assert stats["q1"]["total"] == 3
    assert stats["q1"]["oldest_pending_age_s"] >= 0


def test_wait_reads_the_row_while_redis_is_unreachable(
    make_app: AppFactory, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row is the truth: without Redis the waiter polls it instead of failing."""
    monkeypatch.setattr(Tracker, "REREAD_S", 0.2)
    app = make_app()

    @tracked_task(app=app, queue="q")
    def work() -> None: ...

    job_id = work.enqueue().job_id
    # a second app on the same database whose Redis does not answer
    blind = make_app(tracked_redis_url="redis://127.0.0.1:1/0")
    tracker = tracker_of(app)
    claim = tracker._services.store.claim(
        job_id, Lease(owner="h:1", worker="w", now=utcnow(), lease_s=30)
    )
    assert claim is not None

    def finish() -> None:
        time.sleep(0.5)
        tracker._services.store.complete(
            claim, Completion(result_json='{"pages": 3}', now=utcnow(), duration_ms=1)
        )

    thread = threading.Thread(target=finish)
    thread.start()
    assert tracker_of(blind).wait(job_id, timeout=10) == {"pages": 3}
    thread.join()
