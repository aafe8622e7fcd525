"""The store's conditional transitions, on PostgreSQL and SQLite, with real concurrency."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from celery_tracked import JobStatus, StoreError
from celery_tracked.core.jobs import Claim, NewRow, utcnow
from celery_tracked.core.moves import AttemptError, Completion, Lease, Takeover
from celery_tracked.store import JobStore, Refused

from ..conftest import wait_for
from .conftest import insert_job


@pytest.fixture(params=["as-configured", "core-statements"])
def store(request: pytest.FixtureRequest, database_url: str) -> Iterator[JobStore]:
    """The store as configured (on PostgreSQL: the psycopg fast path), and the same store
    running the same Core statements through SQLAlchemy (as with another PostgreSQL driver)."""
    s = JobStore(database_url)
    if request.param == "core-statements":
        s.engines.get().fastpath = None
    yield s
    s.dispose()


def new_job(store: JobStore, max_attempts: int = 3) -> str:
    return insert_job(store, max_attempts=max_attempts)


def claim(store: JobStore, job_id: str, owner: str = "h:1", lease_s: float = 60) -> Claim | None:
    return store.claim(job_id, Lease(owner=owner, worker="w", now=utcnow(), lease_s=lease_s))


def test_exactly_one_of_many_concurrent_claims_wins(store: JobStore) -> None:
    job_id = new_job(store)
    barrier = threading.Barrier(8)

    def attempt(i: int) -> Claim | None:
        barrier.wait()
        return claim(store, job_id, owner=f"h:{i}")

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(attempt, range(8)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1 and winners[0].attempt == 1
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.PROCESSING and job.attempts_made == 1


def test_outcome_is_fenced_by_the_attempt(store: JobStore) -> None:
    job_id = new_job(store)
    first = claim(store, job_id, lease_s=-1)  # lease already expired
    assert first is not None
    now = utcnow()
    second = store.take_over(
        job_id,
        Lease(owner="h:2", worker="w", now=now, lease_s=60),
        Takeover(seen_attempt=1, grace_s=0, stale_owner=None, reason="lease expired"),
    )
    assert second is not None and second.attempt == 2 and second.takeover
    # the first run wakes up late: its outcome is refused
    assert not store.complete(first, Completion(result_json='"late"', now=utcnow(), duration_ms=1))
    assert store.complete(second, Completion(result_json='"ok"', now=utcnow(), duration_ms=1))
    job = store.get(job_id)
    assert job is not None and job.result == "ok" and job.attempts_made == 2
    assert [e.event for e in store.events(job_id)] == [
        "enqueued",
        "started",
        "redelivered",
        "completed",
    ]


def test_live_lease_cannot_be_taken_over(store: JobStore) -> None:
    job_id = new_job(store)
    assert claim(store, job_id) is not None
    now = utcnow()
    taken = store.take_over(
        job_id,
        Lease(owner="h:2", worker="w", now=now, lease_s=0),
        Takeover(seen_attempt=1, grace_s=0, stale_owner=None, reason=""),
    )
    assert taken is None


def test_terminal_jobs_are_not_claimed(store: JobStore) -> None:
    job_id = new_job(store)
    c = claim(store, job_id)
    assert c is not None
    assert store.complete(c, Completion(result_json=None, now=utcnow(), duration_ms=0))
    assert claim(store, job_id) is None
    assert not store.complete(c, Completion(result_json=None, now=utcnow(), duration_ms=0))


def test_retrying_then_failed(store: JobStore) -> None:
    job_id = new_job(store, max_attempts=2)
    c1 = claim(store, job_id)
    assert c1 is not None
    assert store.retrying(
        c1,
        AttemptError(error_type="E", error_message="m", duration_ms=1, now=utcnow()),
        delay_ms=300,
    )
    assert claim(store, job_id) is None  # not before its backoff is due
    c2 = wait_for(lambda: claim(store, job_id), timeout=10, what="the backoff to be due")
    assert c2.attempt == 2
    assert store.fail(
        c2, AttemptError(error_type="E", error_message="m2", duration_ms=1, now=utcnow())
    )
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.FAILED and job.error_message == "m2"
    assert job.finished_at is not None


def test_joined_rows_exist_only_if_the_completion_committed(store: JobStore) -> None:
    job_id = new_job(store)
    c = claim(store, job_id)
    assert c is not None

    joined = {"job_id": job_id, "event": "joined", "status": "completed", "attempt": 1}
    successor = NewRow("background_job_events", {**joined, "created_at": utcnow()})
    # the second row violates NOT NULL (no created_at): the whole transaction is undone
    broken = [successor, NewRow("background_job_events", joined)]

    with pytest.raises(StoreError):
        store.complete(c, Completion(result_json=None, now=utcnow(), duration_ms=0, rows=broken))
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.PROCESSING
    assert "joined" not in [e.event for e in store.events(job_id)]
    assert store.complete(
        c, Completion(result_json=None, now=utcnow(), duration_ms=0, rows=[successor])
    )
    assert [e.event for e in store.events(job_id)][-2:] == ["completed", "joined"]


def test_database_errors_are_translated() -> None:
    store = JobStore("postgresql+psycopg://user:sekret@127.0.0.1:1/none")
    with pytest.raises(StoreError) as info:
        store.get("x")
    assert "sekret" not in str(info.value)
    store.dispose()


def test_insert_survives_a_terminated_connection(pg_database_url: str) -> None:
    store = JobStore(pg_database_url)
    try:
        new_job(store)  # opens this thread's connection
        terminate_other_backends(pg_database_url)
        job_id = new_job(store)  # the dead connection is replaced, the row written once
        assert store.get(job_id) is not None
    finally:
        store.dispose()


def test_connections_of_finished_threads_are_closed(pg_database_url: str) -> None:
    store = JobStore(pg_database_url)
    try:
        before = backend_count(pg_database_url)
        threads = [threading.Thread(target=new_job, args=(store,)) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wait_for(
            lambda: backend_count(pg_database_url) <= before + 1,
            timeout=10,
            what="the finished threads' connections to close",
        )
    finally:
        store.dispose()


def backend_count(url: str) -> int:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


def terminate_other_backends(url: str) -> None:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            conn.commit()
    finally:
        engine.dispose()


def _claimed(store: JobStore) -> Claim:
    c = claim(store, new_job(store))
    assert c is not None
    return c


def test_a_completion_whose_connection_died_is_saved_when_resent(pg_database_url: str) -> None:
    """The store drops a dead connection and says so; the re-send (the ``OutcomeWriter``'s)
    goes out on a fresh one."""
    store = JobStore(pg_database_url)
    try:
        assert store.complete(
            _claimed(store), Completion(result_json=None, now=utcnow(), duration_ms=0)
        )
        c = _claimed(store)
        terminate_other_backends(pg_database_url)  # during the body
        with pytest.raises(StoreError):
            store.complete(c, Completion(result_json=None, now=utcnow(), duration_ms=0))
        job = store.get(c.job_id)
        assert job is not None and job.status is JobStatus.PROCESSING
        assert store.complete(
            c, Completion(result_json="1", now=utcnow(), duration_ms=0), resent=True
        )
        job = store.get(c.job_id)
        assert job is not None and job.status is JobStatus.COMPLETED and job.result == 1
    finally:
        store.dispose()


def test_a_resent_completion_whose_first_send_committed_is_saved(pg_database_url: str) -> None:
    """The first send committed but its reply was lost: the re-send matches nothing, and
    finds the row completed by this very attempt. Any other attempt's is not ours."""
    store = JobStore(pg_database_url)
    try:
        c = _claimed(store)
        assert store.complete(c, Completion(result_json=None, now=utcnow(), duration_ms=0))
        assert store.complete(
            c, Completion(result_json=None, now=utcnow(), duration_ms=0), resent=True
        )
        assert not store.complete(c, Completion(result_json=None, now=utcnow(), duration_ms=0))
        other = Claim(c.job_id, c.attempt + 1, c.max_attempts)
        assert not store.complete(
            other, Completion(result_json=None, now=utcnow(), duration_ms=0), resent=True
        )
    finally:
        store.dispose()


def test_a_forked_child_never_closes_the_parents_connections(pg_database_url: str) -> None:
    """Thread locals of other threads are dropped in a forked child, and exit finalisers
    run there: neither may end the parent's PostgreSQL sessions."""
    store = JobStore(pg_database_url)
    release = threading.Event()
    opened = threading.Event()
    results: list[bool] = []

    def other_thread() -> None:
        mine = _claimed(store)  # opens this thread's connections (insert: durable; claim: fast)
        opened.set()
        release.wait(30)
        # a plain send (no re-send): it needs the old session
        results.append(
            store.complete(mine, Completion(result_json=None, now=utcnow(), duration_ms=0))
        )

    thread = threading.Thread(target=other_thread)
    try:
        main_claim = _claimed(store)  # the main thread's connections
        thread.start()
        assert opened.wait(30)
        pid = os.fork()
        if pid == 0:  # the child: run what a normal exit would run, then leave
            try:
                weakref.finalize._exitfunc()  # type: ignore[attr-defined]
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        assert store.complete(
            main_claim, Completion(result_json=None, now=utcnow(), duration_ms=0)
        ), "the main thread's session survived"
        release.set()
        thread.join(30)
        assert results == [True], "the other thread's session survived"
    finally:
        release.set()
        store.dispose()


def test_completion_rows_the_database_refuses_raise_refused(store: JobStore) -> None:
    """A constraint or an unknown column is the job's problem, not an outage: ``Refused``
    (the runner then fails the attempt), and nothing of the completion is written."""
    job_id = new_job(store)
    c = claim(store, job_id)
    assert c is not None
    now = utcnow()
    duplicate = {"id": job_id, "queue_name": "q", "job_type": "t", "task_name": "t"}
    duplicate |= {"status": "pending", "max_attempts": 1, "created_at": now, "updated_at": now}
    for rows in (
        [NewRow("background_jobs", duplicate)],
        [NewRow("background_job_events", {"job_id": job_id, "no_such_column": 1})],
    ):
        with pytest.raises(Refused):
            store.complete(c, Completion(result_json=None, now=now, duration_ms=0, rows=rows))
        job = store.get(job_id)
        assert job is not None and job.status is JobStatus.PROCESSING
