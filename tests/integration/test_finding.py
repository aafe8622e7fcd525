"""Finding and acting on jobs on PostgreSQL and SQLite: ``Tracker.jobs`` filters and
keyset pages, ``stats`` health fields, ``retry_many``/``cancel_many`` reports."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from celery import Celery

from celery_tracked import InvalidFilter, JobStatus, Tracker, tracked_task
from celery_tracked.core.fences import AttemptError, Completion, Lease
from celery_tracked.core.jobs import utcnow
from celery_tracked.store import JobStore
from tests.conftest import wait_for

from .conftest import AppFactory, insert_job, queue_messages, tracker_of

#: ``Tracker.retry`` finalizes the app, and Celery then announces to it every ``app.task``
#: of the whole test session (``shared=True`` is Celery's default): the other test
#: modules' same-named local tasks would warn.
pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")


def failed(store: JobStore, job_id: str, error_type: str = "ValueError") -> None:
    claim = store.claim(job_id, Lease(owner="h:1", worker="w", now=utcnow(), lease_s=30))
    assert claim is not None
    assert store.fail(
        claim, AttemptError(error_type=error_type, error_message="x", duration_ms=1, now=utcnow())
    )


def completed(store: JobStore, job_id: str) -> None:
    claim = store.claim(job_id, Lease(owner="h:1", worker="w", now=utcnow(), lease_s=30))
    assert claim is not None
    assert store.complete(claim, Completion(result_json=None, now=utcnow(), duration_ms=1))


def ids(page: Any) -> list[str]:
    return [j.id for j in page.jobs]


@pytest.fixture
def seeded(make_app: AppFactory) -> tuple[Tracker, dict[str, str]]:
    """Seven jobs with distinct attributes, one minute apart (``a`` newest)."""
    tracker = tracker_of(make_app())
    store = tracker._services.store
    now = utcnow()
    spec = {
        "a": {"queue_name": "mail", "job_type": "send", "task_name": "app.send", "owner_id": "u1"},
        "b": {"queue_name": "mail", "job_type": "send", "task_name": "app.send", "owner_id": "u2"},
        "c": {"queue_name": "ocr", "job_type": "ocr", "task_name": "app.ocr", "owner_id": "u1"},
        "d": {"queue_name": "ocr", "job_type": "ocr", "task_name": "app.ocr2", "owner_id": None},
        "e": {"queue_name": "ocr", "job_type": "ocr", "task_name": "app.ocr", "owner_id": "u2"},
        "f": {"queue_name": "mail", "job_type": "digest", "task_name": "app.dg", "owner_id": "u1"},
        "g": {"queue_name": "mail", "job_type": "send", "task_name": "app.send", "owner_id": "u3"},
    }
    made: dict[str, str] = {}
    for n, (name, values) in enumerate(spec.items()):
        at = now - timedelta(minutes=n)
        made[name] = insert_job(
            store, correlation_id=f"corr-{name in 'abc'}", created_at=at, updated_at=at, **values
        )
    failed(store, made["b"], "TimeoutError")
    failed(store, made["c"])
    failed(store, made["e"], "TimeoutError")
    completed(store, made["d"])
    assert store.cancel(made["f"], now=utcnow(), reason="no")
    return tracker, made


def test_each_filter_alone_and_together(seeded: tuple[Tracker, dict[str, str]]) -> None:
    tracker, j = seeded
    every = [j[n] for n in "abcdefg"]
    assert ids(tracker.jobs()) == every  # newest first
    cases: list[tuple[dict[str, Any], str]] = [
        ({"status": "failed"}, "bce"),
        ({"status": ["pending", "cancelled"]}, "afg"),
        ({"queue": "ocr"}, "cde"),
        ({"job_type": "send"}, "abg"),
        ({"task_name": "app.ocr"}, "ce"),
        ({"owner_id": "u1"}, "acf"),
        ({"correlation_id": "corr-True"}, "abc"),
        ({"error_type": "TimeoutError"}, "be"),
        ({"status": "failed", "queue": "ocr", "error_type": "TimeoutError"}, "e"),
        ({"created_after": timedelta(minutes=2, seconds=30)}, "abc"),
        ({"created_before": timedelta(minutes=4, seconds=30)}, "fg"),
        ({"finished_after": timedelta(minutes=1)}, "bcdef"),
        ({"finished_before": utcnow() - timedelta(hours=1)}, ""),
        ({"queue": "nowhere"}, ""),
    ]
    for filters, expected in cases:
        assert ids(tracker.jobs(**filters)) == [j[n] for n in expected], filters


def test_pages_walk_every_job_once_in_order_even_with_equal_creation_times(
    make_app: AppFactory,
) -> None:
    tracker = tracker_of(make_app())
    now = utcnow()
    made = []
    for n in range(23):  # groups of 5 share a created_at: the id breaks the tie
        at = now - timedelta(seconds=n // 5)
        made.append(insert_job(tracker._services.store, created_at=at, updated_at=at))
    rows = [tracker.get_job(i) for i in made]
    expected = [job.id for job in sorted(rows, key=_order, reverse=True)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = tracker.jobs(limit=4, cursor=cursor)
        seen += ids(page)
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
        # a job created meanwhile is newer than the walk: never in a later page
        insert_job(tracker._services.store)
    assert seen == expected and pages == 6


def _order(job: Any) -> tuple[Any, str]:
    return job.created_at, job.id


def test_bad_arguments_are_refused_before_reading(seeded: tuple[Tracker, dict[str, str]]) -> None:
    tracker, _ = seeded
    for call in (
        lambda: tracker.jobs(status="done"),
        lambda: tracker.jobs(limit=0),
        lambda: tracker.jobs(cursor="not-a-cursor"),
        lambda: tracker.retry_many(status="completed"),
        lambda: tracker.cancel_many(status="failed"),
        lambda: tracker.cancel_many(status="processing"),  # only with running=True
        lambda: tracker.retry_many(limit=0),
    ):
        with pytest.raises(InvalidFilter):
            call()


def test_stats_keep_their_fields_and_add_failures_and_expired_leases(
    seeded: tuple[Tracker, dict[str, str]],
) -> None:
    tracker, _ = seeded
    store = tracker._services.store
    stuck = insert_job(store, queue_name="ocr")
    assert store.claim(stuck, Lease(owner="h:1", worker="w", now=utcnow(), lease_s=0.01))
    live = insert_job(store, queue_name="ocr")
    assert store.claim(live, Lease(owner="h:1", worker="w", now=utcnow(), lease_s=60))
    old = insert_job(store, queue_name="mail")
    failed(store, old)
    store.engines.execute(
        store_update_finished(), {"job_id": old, "at": utcnow() - timedelta(hours=2)}
    )
    # the stuck lease expires on the database's clock (SQLite's has millisecond steps)
    wait_for(lambda: tracker.stats()["ocr"]["expired_leases"] == 1, what="the lease expiry")
    stats = tracker.stats()
    assert set(stats) == {"mail", "ocr"}
    mail, ocr = stats["mail"], stats["ocr"]
    assert mail["counts"] == {
        "pending": 2,
        "processing": 0,
        "retrying": 0,
        "completed": 0,
        "failed": 2,
        "cancelled": 1,
    }
    assert mail["total"] == 5 and mail["oldest_pending_age_s"] >= 0
    assert mail["failed_last_hour"] == 1 and mail["expired_leases"] == 0
    assert ocr["counts"]["processing"] == 2 and ocr["counts"]["failed"] == 2
    assert ocr["failed_last_hour"] == 2 and ocr["expired_leases"] == 1
    assert ocr["oldest_pending_age_s"] is None


def store_update_finished() -> Any:
    from sqlalchemy import bindparam, update

    from celery_tracked.store.models import UTCDateTime, jobs

    return (
        update(jobs)
        .where(jobs.c.id == bindparam("job_id"))
        .values(finished_at=bindparam("at", type_=UTCDateTime()))
    )


def _app_with_tasks(make_app: AppFactory) -> tuple[Celery, Any, Any]:
    app = make_app()

    @tracked_task(app=app, shared=False, queue="bulk", max_attempts=1)
    def plain(n: int) -> int:
        return n

    @tracked_task(app=app, shared=False, queue="bulk", max_attempts=1)
    def login(user: str, password: str) -> str:
        return user

    return app, plain, login


def test_retry_many_moves_each_failed_job_through_its_fenced_retry_and_reports_refusals(
    make_app: AppFactory, broker: Any
) -> None:
    app, plain, login = _app_with_tasks(make_app)
    tracker = tracker_of(app)
    store = tracker._services.store
    jobs = [plain.enqueue(n).job_id for n in range(5)]
    secret = login.enqueue("ann", "hunter2").job_id
    for job_id in [*jobs, secret]:
        failed(store, job_id)
    done = plain.enqueue(99).job_id
    assert store.cancel(done, now=utcnow(), reason="x")
    broker.delete("bulk")

    report = tracker.retry_many(queue="bulk")  # failed ones only, by default
    assert set(report.changed) == set(jobs)
    assert list(report.refused) == [secret]
    assert "redacted" in report.refused[secret] and "hunter2" not in report.refused[secret]
    assert report.more is False and report.matched == 6
    for job_id in jobs:
        job = tracker.get_job(job_id)
        assert job is not None and job.status is JobStatus.PENDING
        assert [e.event for e in tracker.history(job_id)][-1] == "retried"
    assert tracker.get_job(secret).status is JobStatus.FAILED  # type: ignore[union-attr]
    assert tracker.get_job(done).status is JobStatus.CANCELLED  # type: ignore[union-attr]
    assert len(queue_messages(broker, "bulk")) == 5  # one message per retried job

    again = tracker.retry_many(status=["failed", "cancelled"], limit=1)
    assert again.matched == 1 and again.more is True
    assert again.changed == (done,)  # newest first


def test_cancel_many_cancels_waiting_jobs_and_leaves_running_ones_unless_asked(
    make_app: AppFactory,
) -> None:
    app, plain, _ = _app_with_tasks(make_app)
    tracker = tracker_of(app)
    store = tracker._services.store
    waiting = [plain.enqueue(n).job_id for n in range(4)]
    running = plain.enqueue(10).job_id
    claim = store.claim(running, Lease(owner="h:1", worker="w@x", now=utcnow(), lease_s=60))
    assert claim is not None

    report = tracker.cancel_many(queue="bulk", reason="maintenance")
    assert set(report.changed) == set(waiting) and not report.refused
    for job_id in waiting:
        job = tracker.get_job(job_id)
        assert job is not None and job.status is JobStatus.CANCELLED
        assert job.error_message == "maintenance"
    assert tracker.get_job(running).status is JobStatus.PROCESSING  # type: ignore[union-attr]

    asked = tracker.cancel_many(queue="bulk", running=True)
    assert asked.changed == (running,)
    job = tracker.get_job(running)
    assert job is not None and job.status is JobStatus.PROCESSING  # its run goes on...
    assert job.cancel_requested_at is not None  # ...asked to stop
    assert not store.complete(claim, Completion(result_json=None, now=utcnow(), duration_ms=1))
    assert store.cancel_run(claim, now=utcnow(), message="cancelled while running")
    assert tracker.get_job(running).status is JobStatus.CANCELLED  # type: ignore[union-attr]
