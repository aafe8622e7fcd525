"""A row another session holds while a cleanup passes it is not left behind (issue 23,
item 5: two cleanups at once on MariaDB counted 1,499 of 1,500).

The cause, reproduced deterministically with two sessions: a batch takes its rows ``FOR
UPDATE SKIP LOCKED`` and the next batch starts after the last row it took. A row locked by
another session at that moment (another cleanup's scan locks rows it then lets go, a
``retry`` that is rolled back) was skipped, and the keyset cursor passed it: no later
batch of that run looked at it again, and the other session did not remove it either."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from celery import Celery
from sqlalchemy import create_engine, select, text
from sqlalchemy.pool import NullPool

from celery_tracked import Tracker
from celery_tracked.store import cleanup, migrate
from celery_tracked.store.models import jobs

from .test_cleanup import DAY, NOW, job_ids, seed


@pytest.fixture(params=["postgres", "mariadb"])
def url(request: pytest.FixtureRequest) -> str:
    made = str(request.getfixturevalue(f"{request.param}_url"))
    migrate.upgrade(made)
    return made


@pytest.fixture
def app(url: str, redis_url: str) -> Iterator[Celery]:
    made = Celery("skipped", broker=redis_url, set_as_current=False)
    made.conf.update(
        tracked_database_url=url,
        tracked_redis_url=redis_url,
        broker_connection_retry_on_startup=False,
        tracked_cleanup_batch_size=2,
    )
    yield made
    Tracker.for_app(made).close()
    made.close()


def test_a_row_locked_between_two_pages_is_removed_by_a_later_page(app: Celery, url: str) -> None:
    ids = seed(url, "completed", 5, 8 * DAY)
    oldest_first = ids[::-1]  # row i ended i seconds before row i - 1
    other = create_engine(url, poolclass=NullPool)
    session = other.connect()
    seen: list[int] = []

    def between_batches(removed: int) -> None:
        seen.append(removed)
        if len(seen) == 1:  # after the page of rows 1-2: another session holds row 3
            held = select(jobs.c.id).where(jobs.c.id == oldest_first[2]).with_for_update()
            assert session.execute(held).scalar_one() == oldest_first[2]
        elif len(seen) == 2:  # the page of rows 4-5 skipped it; the session lets it go
            session.rollback()

    try:
        report = Tracker.for_app(app).cleanup(now=NOW, on_batch=between_batches)
    finally:
        session.rollback()
        session.close()
        other.dispose()
    assert job_ids(url) == set()
    assert report.removed["completed"] == 5
    assert seen[:2] == [2, 2]


def test_a_row_locked_for_the_whole_run_is_left_and_the_run_ends(app: Celery, url: str) -> None:
    ids = seed(url, "completed", 5, 8 * DAY)
    other = create_engine(url, poolclass=NullPool)
    with other.connect() as session:
        session.execute(text("SELECT 1"))
        held = select(jobs.c.id).where(jobs.c.id == ids[2]).with_for_update()
        session.execute(held).scalar_one()
        report = Tracker.for_app(app).cleanup(now=NOW)
        session.rollback()
    other.dispose()
    assert job_ids(url) == {ids[2]}
    assert report.removed["completed"] == 4


def test_a_row_held_for_a_moment_at_the_end_of_the_walk_is_removed(
    app: Celery, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last batch takes nothing because another session holds the last row: the
    cleanup looks again after a pause (here, the other session lets go in it)."""
    ids = seed(url, "completed", 5, 8 * DAY)
    newest = ids[0]
    other = create_engine(url, poolclass=NullPool)
    session = other.connect()
    seen: list[int] = []
    pauses: list[float] = []

    def between_batches(removed: int) -> None:
        seen.append(removed)
        if len(seen) == 1:
            held = select(jobs.c.id).where(jobs.c.id == newest).with_for_update()
            session.execute(held).scalar_one()

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        session.rollback()  # the other session lets go while the cleanup waits

    monkeypatch.setattr(cleanup, "time", SimpleNamespace(sleep=pause))
    try:
        report = Tracker.for_app(app).cleanup(now=NOW, on_batch=between_batches)
    finally:
        session.rollback()
        session.close()
        other.dispose()
    assert pauses and job_ids(url) == set()
    assert report.removed["completed"] == 5
