"""Key lifetimes, relative filters and the CLI's ages are judged on the database's clock,
not on the producer's or the reader's (DESIGN: every age on the database's clock; issue 22,
item 3 follow-up). A skewed producer is this process with its clock moved (its modules'
``utcnow`` patched); the database's clock stays real. PostgreSQL and SQLite.
"""

from __future__ import annotations

import time
import types
import uuid
from datetime import datetime, timedelta

import pytest
import redis
from celery import Celery
from click.testing import CliRunner

from celery_tracked import TrackedTask, tracked_task
from celery_tracked.cli import listing, tracked
from celery_tracked.core import finder
from celery_tracked.core.jobs import utcnow
from celery_tracked.migrate import upgrade
from celery_tracked.services import enqueue, pipelines

from .conftest import AppFactory, tracker_of

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")
SKEW = timedelta(seconds=30)


def moved(monkeypatch: pytest.MonkeyPatch, module: object, by: timedelta) -> None:
    """This process's clock, as ``module`` reads it, ``by`` away from the database's."""

    def skewed() -> datetime:
        return utcnow() + by

    monkeypatch.setattr(module, "utcnow", skewed, raising=False)


def keyed(app: Celery, **options: object) -> TrackedTask:
    name = f"key_clock.work.{uuid.uuid4().hex}"  # one per test: Celery shares names

    @tracked_task(app=app, name=name, queue="key_clock", idempotency_key="k:{n}", **options)
    def work(n: int, note: str = "") -> None: ...

    return work


def test_a_producer_ahead_is_throttled_within_the_window(
    make_app: AppFactory, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job created by a producer on time; a second producer 30 s ahead enqueues the key
    within the 10 s window: deduplicated (before: a new round, its clock said 30 s)."""
    work = keyed(make_app(), key_lifetime="throttle", throttle_s=10)
    first = work.enqueue(n=1)
    moved(monkeypatch, enqueue, SKEW)
    again = work.enqueue(n=1)
    assert first.created and not again.created
    assert again.job_id == first.job_id


def test_a_throttle_window_is_measured_from_the_database_clock(
    make_app: AppFactory, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer 30 s ahead creates the key's job: a producer on time gets a new round
    once the 1 s window passed (before: deduplicated for 31 s, the row was stamped 30 s
    in the future); the throttled rows are created on the database's clock."""
    app = make_app()
    work = keyed(app, key_lifetime="throttle", throttle_s=1)
    moved(monkeypatch, enqueue, SKEW)
    first = work.enqueue(n=2)
    assert work.enqueue(n=2).job_id == first.job_id  # within the window, still ahead
    monkeypatch.undo()
    time.sleep(1.2)
    later = work.enqueue(n=2)
    assert later.created and later.job_id != first.job_id
    tracker = tracker_of(app)
    row = tracker.get_job(first.job_id)
    assert row is not None
    assert abs(row.created_at - tracker._services.store.clock()) < timedelta(seconds=10)


def test_a_producer_behind_keeps_its_throttle(
    make_app: AppFactory, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer 30 s behind the database alone: deduplicated within the window, a new
    round after it (held before too; judging on the database's clock must not break it)."""
    work = keyed(make_app(), key_lifetime="throttle", throttle_s=1)
    moved(monkeypatch, enqueue, -SKEW)
    first = work.enqueue(n=3)
    assert work.enqueue(n=3).job_id == first.job_id
    time.sleep(1.2)
    later = work.enqueue(n=3)
    assert later.created and later.job_id != first.job_id


@pytest.mark.parametrize("by", [SKEW, -SKEW])
def test_a_skewed_producer_still_debounces(
    make_app: AppFactory, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch, by: timedelta
) -> None:
    """Debounce decides on the status alone: a skewed producer replaces the arguments of
    the key's pending job (held before too)."""
    app = make_app()
    work = keyed(app, key_lifetime="debounce")
    first = work.enqueue(n=4, note="first")
    moved(monkeypatch, enqueue, by)
    again = work.enqueue(n=4, note="second")
    assert again.job_id == first.job_id and not again.created
    job = tracker_of(app).get_job(first.job_id)
    assert job is not None and job.revision == 1 and "second" in (job.payload_json or "")


def test_a_relative_filter_is_taken_back_from_the_database_clock(
    make_app: AppFactory, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``created_after=timedelta(seconds=10)`` on a host 30 s ahead finds the job created
    a moment ago (before: the bound was 20 s in the future, nothing matched)."""
    app = make_app()
    job = keyed(app).enqueue(n=5)
    moved(monkeypatch, finder, SKEW)
    tracker = tracker_of(app)
    page = tracker.jobs(created_after=timedelta(seconds=10))
    assert [j.id for j in page.jobs] == [job.job_id]
    assert tracker.jobs(created_before=timedelta(seconds=10)).jobs == ()


def test_the_cli_shows_ages_on_the_database_clock(
    make_app: AppFactory, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tracked jobs`` and ``show`` on a host 30 s ahead: a job created a moment ago is
    "0s ago"-ish, not "30s ago"."""
    app = make_app()
    job = keyed(app).enqueue(n=6)
    moved(monkeypatch, listing, SKEW)
    obj = types.SimpleNamespace(app=app)
    for args in (["jobs"], ["show", job.job_id, "--no-history"]):
        out = CliRunner().invoke(tracked, args, obj=obj)
        assert out.exit_code == 0, out.output
        assert "30s ago" not in out.output and "31s ago" not in out.output, out.output
        assert any(f"{n}s ago" in out.output for n in range(10)), out.output


def test_a_worker_ahead_declares_a_throttled_successor_within_the_window(
    make_app: AppFactory, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step run on time declares a throttled successor (round 0); the same step run by
    a worker 30 s ahead within the 10 s window takes no new round (before: round 1, its
    clock said the window had passed); the successor's row is stamped on the database's
    clock."""
    app = make_app(task_always_eager=True)
    name = uuid.uuid4().hex

    @tracked_task(
        app=app,
        name=f"key_clock.leaf.{name}",
        bind=True,
        idempotency_key="leaf:{tag}",
        key_lifetime="throttle",
        throttle_s=10,
    )
    def leaf(self: object, tag: str) -> str:
        return tag

    @tracked_task(app=app, name=f"key_clock.root.{name}", bind=True)
    def root(self: TrackedTask, tag: str) -> None:
        self.then(leaf, tag)

    root.delay("x")
    store = tracker_of(app)._services.store
    first = store.find_by_key(leaf.tracked_job_type, "leaf:x")
    assert first is not None and first.key_round == 0
    moved(monkeypatch, pipelines, SKEW)
    root.delay("x")
    latest = store.find_by_key(leaf.tracked_job_type, "leaf:x")
    assert latest is not None and latest.id == first.id
    monkeypatch.undo()
    moved(monkeypatch, pipelines, -SKEW)
    time.sleep(10.2 - (store.clock() - first.created_at).total_seconds())
    root.delay("x")
    latest = store.find_by_key(leaf.tracked_job_type, "leaf:x")
    assert latest is not None and latest.key_round == 1
    assert abs(latest.created_at - store.clock()) < timedelta(seconds=5)


@pytest.mark.parametrize(
    ("options", "reads"),
    [
        ({}, 0),
        ({"key_lifetime": "ended"}, 0),
        ({"key_lifetime": "debounce"}, 0),
        ({"key_lifetime": "throttle", "throttle_s": 10}, 2),
    ],
)
def test_only_a_throttled_enqueue_reads_the_database_clock(
    make_app: AppFactory,
    broker: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    options: dict[str, object],
    reads: int,
) -> None:
    """The hot path gains no round trip: two enqueues of one key read the database's
    clock only under a throttle (once per decision)."""
    app = make_app()
    work = keyed(app, **options)
    store = tracker_of(app)._services.enqueuer.store
    calls: list[datetime] = []
    real = store.clock

    def counted() -> datetime:
        calls.append(real())
        return calls[-1]

    monkeypatch.setattr(store, "clock", counted)
    first = work.enqueue(n=7)
    assert work.enqueue(n=7).job_id == first.job_id
    assert len(calls) == reads


def test_a_producer_ahead_is_throttled_on_mariadb(
    mariadb_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on MariaDB (``UTC_TIMESTAMP(6)``): within the window deduplicated, a
    throttled row stamped on the database's clock."""
    upgrade(mariadb_url)
    app = Celery("key_clock_maria", broker=redis_url, set_as_current=False)
    app.conf.update(tracked_database_url=mariadb_url, tracked_redis_url=redis_url)
    app.conf.update(broker_connection_retry_on_startup=False)
    try:
        work = keyed(app, key_lifetime="throttle", throttle_s=10)
        first = work.enqueue(n=8)
        moved(monkeypatch, enqueue, SKEW)
        again = work.enqueue(n=8)
        assert first.created and again.job_id == first.job_id and not again.created
        tracker = tracker_of(app)
        row = tracker.get_job(first.job_id)
        assert row is not None
        assert abs(row.created_at - tracker._services.store.clock()) < timedelta(seconds=10)
    finally:
        tracker_of(app).close()
        app.close()
