"""Every write a caller is told succeeded commits durably on PostgreSQL, whatever the
server's default ``synchronous_commit`` (issue 12, item 1); the writes whose loss only
lets a job run again (the claim, the producer's hand-over mark) commit asynchronously.

A deferred trigger records, at commit, the ``synchronous_commit`` each change of
``background_jobs`` committed with, on a database whose default is ``off``. The crash
itself is tests/acceptance/test_durable_enqueue.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from celery_tracked.core.fences import Completion, Lease
from celery_tracked.core.jobs import NewRow, utcnow
from celery_tracked.store import JobStore

from .conftest import insert_job

pytestmark = pytest.mark.postgres


def _record_commit_modes(url: str) -> None:
    engine = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(
                text(
                    "CREATE TABLE commit_modes (n serial, op text, status text, mode text);"
                    "CREATE FUNCTION note_mode() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    "INSERT INTO commit_modes (op, status, mode) VALUES (TG_OP, "
                    "CASE WHEN TG_OP = 'DELETE' THEN OLD.status ELSE NEW.status END, "
                    "current_setting('synchronous_commit')); RETURN NULL; END $$;"
                    "CREATE CONSTRAINT TRIGGER note_mode AFTER INSERT OR UPDATE OR DELETE "
                    "ON background_jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
                    "EXECUTE FUNCTION note_mode();"
                    f'ALTER DATABASE "{url.rsplit("/", 1)[1]}" SET synchronous_commit = off'
                )
            )
    finally:
        engine.dispose()


def _commit_modes(url: str) -> list[tuple[str, str, str]]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT op, status, mode FROM commit_modes ORDER BY n"))
            return [(r[0], r[1], r[2]) for r in rows]
    finally:
        engine.dispose()


@pytest.fixture(params=["fast-path", "core-statements"])
def recorded(request: pytest.FixtureRequest, pg_database_url: str) -> Iterator[JobStore]:
    """A store on a database whose default is ``synchronous_commit=off``, through the
    psycopg fast path and through SQLAlchemy (the same Core statements)."""
    _record_commit_modes(pg_database_url)
    store = JobStore(pg_database_url)
    if request.param == "core-statements":
        store.engines.get().fastpath = None
    yield store
    store.dispose()


def test_the_writes_a_caller_is_told_about_commit_durably(recorded: JobStore) -> None:
    store, now = recorded, utcnow()
    job_id = insert_job(store)  # enqueue
    assert store.replace_arguments(
        job_id, seen_revision=0, payload_json="{}", now=now, message="debounced"
    )
    assert store.cancel(job_id, now=now, reason="by hand")  # Tracker.cancel
    assert store.retry(job_id, seen_revision=1, budget=3, now=now, message="retried")
    assert store.handed_over(job_id, now, revision=2)
    c = store.claim(job_id, Lease(owner="h:1", worker="w", now=now, lease_s=60, revision=2))
    assert c is not None
    successor = {"job_id": job_id, "event": "x", "status": "completed", "attempt": 1}
    rows = [NewRow("background_job_events", {**successor, "created_at": now})]
    assert store.complete(c, Completion(result_json=None, now=now, duration_ms=0, rows=rows))
    undone = insert_job(store)
    assert store.undo(undone)  # the publish failed: the caller is told nothing exists
    assert _commit_modes(store.url) == [
        ("INSERT", "pending", "on"),
        ("UPDATE", "pending", "on"),  # a debounce replacement
        ("UPDATE", "cancelled", "on"),
        ("UPDATE", "pending", "on"),  # Tracker.retry
        ("UPDATE", "pending", "off"),  # handed over: lost, the relay sends a duplicate
        ("UPDATE", "processing", "off"),  # the claim: lost, the job runs again
        ("UPDATE", "completed", "on"),
        ("INSERT", "pending", "on"),
        ("DELETE", "pending", "on"),
    ]
