"""PostgreSQL's fast path sends the hand-over mark without waiting for its answer: the
mark lands even when nothing follows it, a failure is logged and leaves the connection
usable, and a process that dies right after the send still leaves the mark."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, literal, select, text

from celery_tracked.core.jobs import utcnow
from celery_tracked.store import JobStore

from ..conftest import ROOT, wait_for
from .conftest import insert_job


@pytest.fixture
def store(pg_database_url: str) -> Iterator[JobStore]:
    s = JobStore(pg_database_url)
    assert s.engines.get().fastpath is not None
    yield s
    s.dispose()


def published(url: str, job_id: str) -> bool:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = text("SELECT published_at IS NOT NULL FROM background_jobs WHERE id = :i")
            return bool(conn.execute(query, {"i": job_id}).scalar())
    finally:
        engine.dispose()


def test_a_mark_lands_though_this_thread_sends_nothing_after_it(
    store: JobStore, pg_database_url: str
) -> None:
    job_id = insert_job(store)
    store.note_handed_over(job_id, utcnow())
    wait_for(lambda: published(pg_database_url, job_id), timeout=10)


def test_the_thread_that_sent_the_mark_reads_it_at_once(store: JobStore) -> None:
    for _ in range(50):
        job_id = insert_job(store)
        store.note_handed_over(job_id, utcnow())
        job = store.get(job_id)  # a read of this thread waits for the mark's answer first
        assert job is not None and job.published_at is not None


def test_a_failed_statement_sent_without_waiting_is_logged_and_the_next_one_runs(
    store: JobStore, caplog: pytest.LogCaptureFixture
) -> None:
    fastpath = store.engines.get().fastpath
    assert fastpath is not None
    job_id = insert_job(store)
    fastpath.send("divide", lambda: select(literal(1) / literal(0)), {})
    with caplog.at_level(logging.WARNING, logger="celery_tracked"):
        after = fastpath.execute("one", lambda: select(literal(1)), {})
    assert after == (1,)
    found = store.get(job_id)
    assert found is not None and found.id == job_id
    assert any("divide failed" in r.getMessage() for r in caplog.records)


def test_a_connection_killed_after_the_send_is_replaced_at_the_next_statement(
    store: JobStore, pg_database_url: str
) -> None:
    fastpath = store.engines.get().fastpath
    assert fastpath is not None
    job_id = insert_job(store)
    (pid,) = fastpath.execute("pid", lambda: select(text("pg_backend_pid()")), {}) or (0,)
    store.note_handed_over(job_id, utcnow())
    admin = create_engine(pg_database_url)
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    admin.dispose()
    # the answer is read (or found lost) first; a dead connection is replaced, and the
    # store's call is sent again on the new one (``reconnecting``)
    assert store.key_busy(job_id, "k", 1) is False
    assert fastpath.execute("one", lambda: select(literal(1)), {}) == (1,)


def test_a_producer_that_dies_right_after_the_send_leaves_the_mark(
    store: JobStore, pg_database_url: str
) -> None:
    job_id = insert_job(store)
    script = textwrap.dedent(
        f"""
        import os
        from celery_tracked.core.jobs import utcnow
        from celery_tracked.store import JobStore
        store = JobStore({pg_database_url!r})
        store.note_handed_over({job_id!r}, utcnow())
        os._exit(0)  # no answer read, no goodbye to the server
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=60)
    wait_for(lambda: published(pg_database_url, job_id), timeout=10)
