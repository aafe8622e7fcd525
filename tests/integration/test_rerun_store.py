"""The moves that give a job a new message (debounce, ``Tracker.retry``) and the revision
fence of deliveries, on PostgreSQL (fast path and Core statements) and SQLite."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from celery_tracked import JobStatus
from celery_tracked.core.fences import AttemptError, Lease, RetryUndo
from celery_tracked.core.jobs import utcnow
from celery_tracked.core.keys import UndoneReplace
from celery_tracked.store import DuplicateJob, JobStore

from .conftest import insert_job


@pytest.fixture(params=["as-configured", "core-statements"])
def store(request: pytest.FixtureRequest, database_url: str) -> Iterator[JobStore]:
    s = JobStore(database_url)
    if request.param == "core-statements":
        s.engines.get().fastpath = None
    yield s
    s.dispose()


def new_job(store: JobStore, key: str | None = None, key_round: int = 0) -> str:
    payload = '{"args": [], "kwargs": {"n": 0}}'
    return insert_job(
        store, payload_json=payload, max_attempts=2, idempotency_key=key, key_round=key_round
    )


def claim(store: JobStore, job_id: str, revision: int = 0) -> object:
    return store.claim(
        job_id, Lease(owner="h:1", worker="w", now=utcnow(), lease_s=60, revision=revision)
    )


def replace_args(store: JobStore, job_id: str, seen: int, n: int) -> bool:
    payload = f'{{"args": [], "kwargs": {{"n": {n}}}}}'
    return store.replace_arguments(
        job_id, seen_revision=seen, payload_json=payload, now=utcnow(), message="replaced"
    )


def test_a_key_has_one_job_per_round(store: JobStore) -> None:
    key = f"k-{uuid.uuid4().hex[:6]}"
    first = new_job(store, key)
    with pytest.raises(DuplicateJob):
        new_job(store, key)
    second = new_job(store, key, key_round=1)
    latest = store.find_by_key("t", key)
    assert latest is not None and (latest.id, latest.key_round) == (second, 1)
    assert first != second


def test_a_replaced_message_never_claims(store: JobStore) -> None:
    job_id = new_job(store)
    assert replace_args(store, job_id, seen=0, n=1)
    assert not replace_args(store, job_id, seen=0, n=2), "compare-and-set on the revision"
    job = store.get(job_id)
    assert job is not None and (job.revision, job.payload) == (1, {"args": [], "kwargs": {"n": 1}})
    assert job.published_at is None
    assert [e.event for e in store.events(job_id)] == ["enqueued", "debounced"]
    assert claim(store, job_id, revision=0) is None
    assert not store.handed_over(job_id, utcnow(), 0), "the stale message is not the row's"
    assert store.handed_over(job_id, utcnow(), 1)
    assert claim(store, job_id, revision=1) is not None
    assert not replace_args(store, job_id, seen=1, n=3), "only a pending job is replaced"


def test_concurrent_replacements_each_make_one_revision(store: JobStore) -> None:
    job_id = new_job(store)
    barrier = threading.Barrier(8)

    def replace_until_done(n: int) -> int:
        barrier.wait()
        while True:
            job = store.get(job_id)
            assert job is not None
            if replace_args(store, job_id, seen=job.revision, n=n):
                return job.revision + 1

    with ThreadPoolExecutor(8) as pool:
        made = sorted(pool.map(replace_until_done, range(8)))
    assert made == list(range(1, 9))
    job = store.get(job_id)
    assert job is not None and job.revision == 8


def test_an_undone_replacement_gives_the_arguments_back_at_a_newer_revision(
    store: JobStore,
) -> None:
    """Never the previous revision (its message may have been consumed meanwhile): the
    previous arguments at revision 2, unpublished, so the relay sends the row."""
    job_id = new_job(store)
    store.handed_over(job_id, utcnow(), 0)
    before = store.get(job_id)
    assert before is not None and before.published_at is not None
    assert replace_args(store, job_id, seen=0, n=5)
    undo = UndoneReplace(revision=2, payload_json=before.payload_json)
    assert store.undo_replace(job_id, 1, undo, now=utcnow(), message="undone")
    after = store.get(job_id)
    assert after is not None
    assert (after.revision, after.payload_json) == (2, before.payload_json)
    assert after.status is JobStatus.PENDING and after.published_at is None
    assert [e.event for e in store.events(job_id)][-2:] == ["debounced", "debounce_undone"]
    assert claim(store, job_id, revision=0) is None, "the previous message runs nothing"
    assert claim(store, job_id, revision=1) is None, "nor the replacement's"
    later = utcnow() + timedelta(seconds=5)
    assert job_id in store.unpublished(cutoff=later, now=later), "the relay's to send"
    assert not store.undo_replace(job_id, 1, undo, now=utcnow(), message="undone"), "undone once"
    assert claim(store, job_id, revision=2) is not None
    # an undo never applies once that revision was handed over
    other = new_job(store)
    assert replace_args(store, other, seen=0, n=5) and store.handed_over(other, utcnow(), 1)
    assert not store.undo_replace(other, 1, undo, now=utcnow(), message="undone")
    # nor once a relay took the row
    third = new_job(store)
    assert replace_args(store, third, seen=0, n=5)
    assert store.relay_claim(third, owner="relay", now=later, lease_s=30, cutoff=later)
    assert not store.undo_replace(third, 1, undo, now=utcnow(), message="undone")


def fail(store: JobStore, job_id: str) -> None:
    c = store.claim(job_id, Lease(owner="h:1", worker="w", now=utcnow(), lease_s=60))
    assert c is not None
    assert store.fail(
        c, AttemptError(error_type="E", error_message="boom", duration_ms=1, now=utcnow())
    )


def test_retry_moves_a_failed_job_back_with_more_attempts(store: JobStore) -> None:
    job_id = new_job(store)
    fail(store, job_id)
    assert not store.retry(job_id, seen_revision=1, budget=3, now=utcnow(), message="r")
    assert store.retry(job_id, seen_revision=0, budget=3, now=utcnow(), message="retried")
    job = store.get(job_id)
    assert job is not None
    assert (job.status, job.revision, job.attempts_made, job.max_attempts) == (
        JobStatus.PENDING,
        1,
        1,
        4,
    )
    assert job.finished_at is None and job.published_at is None
    assert [e.event for e in store.events(job_id)][-2:] == ["failed", "retried"]
    assert not store.retry(job_id, seen_revision=1, budget=3, now=utcnow(), message="again")
    assert claim(store, job_id, revision=0) is None
    c = claim(store, job_id, revision=1)
    assert c is not None and c.attempt == 2  # type: ignore[attr-defined]


def test_an_undone_retry_is_failed_again(store: JobStore) -> None:
    job_id = new_job(store)
    fail(store, job_id)
    failed = store.get(job_id)
    assert failed is not None
    assert store.retry(job_id, seen_revision=0, budget=3, now=utcnow(), message="retried")
    assert store.undo_retry(
        job_id,
        RetryUndo(
            made=1,
            status=JobStatus.FAILED,
            max_attempts=failed.max_attempts,
            finished_at=failed.finished_at,
        ),
        now=utcnow(),
        message="retry undone",
    )
    job = store.get(job_id)
    assert job is not None
    assert (job.status, job.max_attempts, job.finished_at) == (
        JobStatus.FAILED,
        2,
        failed.finished_at,
    )
    assert [e.event for e in store.events(job_id)][-2:] == ["retried", "retry_undone"]


def test_a_jobs_rounds_are_its_retries_and_their_undos(store: JobStore) -> None:
    """What ``Tracker.retry`` reads to give a task it does not know the attempts its
    latest round was given (``resend.granted``)."""
    job_id = new_job(store)
    assert store.retry_rounds(job_id) == []
    fail(store, job_id)
    failed = store.get(job_id)
    assert failed is not None
    assert store.retry(job_id, seen_revision=0, budget=3, now=utcnow(), message="retried")
    undo = RetryUndo(
        made=1, status=JobStatus.FAILED, max_attempts=2, finished_at=failed.finished_at
    )
    assert store.undo_retry(job_id, undo, now=utcnow(), message="retry undone")
    assert store.retry(job_id, seen_revision=1, budget=5, now=utcnow(), message="retried")
    assert store.retry_rounds(job_id) == [("retried", 1), ("retry_undone", 1), ("retried", 1)]
    job = store.get(job_id)
    assert job is not None and job.max_attempts == 6


def test_retry_is_refused_while_a_newer_job_holds_the_key(store: JobStore) -> None:
    key = f"k-{uuid.uuid4().hex[:6]}"
    first = new_job(store, key)
    assert store.cancel(first, now=utcnow(), reason="c")
    new_job(store, key, key_round=1)
    assert not store.retry(first, seen_revision=0, budget=1, now=utcnow(), message="r")
    job = store.get(first)
    assert job is not None and job.status is JobStatus.CANCELLED


def test_an_expired_stale_message_cancels_nothing(store: JobStore) -> None:
    """An expired message cancels its job only while it is the job's current message."""
    job_id = new_job(store)
    assert replace_args(store, job_id, seen=0, n=1)
    assert not store.cancel(job_id, now=utcnow(), reason="expired", revision=0)
    assert store.cancel(job_id, now=utcnow(), reason="expired", revision=1)
    other = new_job(store)
    assert store.cancel(other, now=utcnow(), reason="revoked"), "a revoke names every message"
