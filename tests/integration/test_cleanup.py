"""Retention cleanup on real databases (issue 13, item 1): PostgreSQL, SQLite and MariaDB,
real Redis as broker and guard. Old ended rows go in batches with their events; active
and recent rows stay; two cleanups at once both succeed and count each row once; the next
enqueue of a removed key creates a new job at once."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from sqlalchemy import create_engine, insert, select, text, update
from sqlalchemy.pool import NullPool

from celery_tracked import CleanupReport, StoreError, Tracker, tracked_task
from celery_tracked.core.cleanup import Boundary, policy_of, sweeps
from celery_tracked.core.jobs import utcnow
from celery_tracked.store.models import events, jobs

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")

NOW = utcnow()
DAY = timedelta(days=1)
QUEUE = "cleanup_q"


@pytest.fixture(params=["postgres", "sqlite", "mariadb"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty tracking database on PostgreSQL, SQLite and MariaDB."""
    from celery_tracked.store import migrate

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'cleanup.sqlite3'}"
    else:
        url = str(request.getfixturevalue(f"{request.param}_url"))
    migrate.upgrade(url)
    return url


@pytest.fixture
def make_app(db_url: str, redis_url: str) -> Iterator[Callable[..., Celery]]:
    apps: list[Celery] = []

    def factory(**conf: Any) -> Celery:
        app = Celery(f"cleanup{len(apps)}", broker=redis_url, set_as_current=False)
        defaults = {"tracked_database_url": db_url, "tracked_redis_url": redis_url}
        app.conf.update({**defaults, "broker_connection_retry_on_startup": False, **conf})
        apps.append(app)
        return app

    yield factory
    for app in apps:
        tracker = app.__dict__.get("_celery_tracked_tracker")
        if tracker is not None:
            tracker.close()
        app.close()


def run_sql(url: str, statement: Any, params: Any = None) -> Any:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            result = (
                conn.execute(statement, params) if params is not None else conn.execute(statement)
            )
            return result.all() if result.returns_rows else result.rowcount
    finally:
        engine.dispose()


def build(
    status: str,
    count: int,
    ended_ago: timedelta | None,
    *,
    task: str = "t",
    queue: str = QUEUE,
    key: Callable[[int], str | None] = lambda i: None,
    n_events: int = 3,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``count`` rows of ``status`` that ended ``ended_ago`` (None: not ended), and
    ``n_events`` events for each."""
    rows, history = [], []
    for i in range(count):
        job_id = str(uuid.uuid4())
        finished = None if ended_ago is None else NOW - ended_ago - timedelta(seconds=i)
        created = NOW - (ended_ago or DAY) - timedelta(hours=1)
        rows.append(
            {
                "id": job_id,
                "queue_name": queue,
                "job_type": task,
                "task_name": task,
                "celery_task_id": job_id,
                "status": status,
                "payload_json": "{}",
                "max_attempts": 3,
                "attempts_made": 1,
                "idempotency_key": key(i),
                "correlation_id": job_id,
                "created_at": created,
                "updated_at": finished or created,
                "finished_at": finished,
            }
        )
        history += [
            {"job_id": job_id, "event": "e", "status": status, "attempt": 1, "created_at": created}
            for _ in range(n_events)
        ]
    return rows, history


def store(url: str, rows: list[dict[str, Any]], history: list[dict[str, Any]]) -> None:
    run_sql(url, insert(jobs), rows)
    if history:
        run_sql(url, insert(events), history)


def seed(url: str, status: str, count: int, ended_ago: timedelta | None, **kw: Any) -> list[str]:
    """Insert what :func:`build` makes; the rows' ids."""
    rows, history = build(status, count, ended_ago, **kw)
    store(url, rows, history)
    return [r["id"] for r in rows]


def job_ids(url: str) -> set[str]:
    return {r[0] for r in run_sql(url, select(jobs.c.id))}


def event_job_ids(url: str) -> list[str]:
    return [r[0] for r in run_sql(url, select(events.c.job_id))]


def test_old_ended_jobs_go_in_batches_with_their_events_and_nothing_else(
    make_app: Callable[..., Celery], db_url: str
) -> None:
    app = make_app(tracked_cleanup_batch_size=10)
    old_completed = seed(db_url, "completed", 25, 8 * DAY)
    old_failed = seed(db_url, "failed", 5, 31 * DAY)
    old_cancelled = seed(db_url, "cancelled", 4, 31 * DAY)
    kept = seed(db_url, "completed", 5, 6 * DAY)  # recent
    kept += seed(db_url, "failed", 5, 20 * DAY)  # failed: 30 days
    kept += seed(db_url, "cancelled", 5, 29 * DAY)
    for status in ("pending", "processing", "retrying"):  # active: never, whatever their age
        kept += seed(db_url, status, 3, None)
        kept += seed(db_url, status, 2, 400 * DAY)  # even with a stale finished_at
    batches: list[int] = []

    report = Tracker.for_app(app).cleanup(on_batch=batches.append)

    assert isinstance(report, CleanupReport)
    assert report.removed == {"completed": 25, "failed": 5, "cancelled": 4}
    assert report.total == 34 and report.events == 34 * 3
    assert batches == [10, 10, 5, 5, 4] and report.batches == 5
    assert job_ids(db_url) == set(kept)
    assert sorted(event_job_ids(db_url)) == sorted(kept * 3), "only the removed jobs' events"
    assert not set(old_completed + old_failed + old_cancelled) & job_ids(db_url)
    again = Tracker.for_app(app).cleanup()
    assert again.total == 0 and again.batches == 0


def test_a_dry_run_counts_and_removes_nothing(make_app: Callable[..., Celery], db_url: str) -> None:
    app = make_app()
    seed(db_url, "completed", 7, 8 * DAY)
    seed(db_url, "failed", 2, 31 * DAY)
    seed(db_url, "completed", 3, DAY)
    before = job_ids(db_url)
    seen: list[int] = []
    report = Tracker.for_app(app).cleanup(dry_run=True, on_batch=seen.append)
    assert report.dry_run and report.removed == {"completed": 7, "failed": 2, "cancelled": 0}
    assert sum(seen) == 9 and report.batches == 0
    assert job_ids(db_url) == before
    assert Tracker.for_app(app).cleanup().total == 9


def test_now_judges_the_ages(make_app: Callable[..., Celery], db_url: str) -> None:
    app = make_app()
    recent = seed(db_url, "completed", 3, DAY)
    assert Tracker.for_app(app).cleanup().total == 0
    report = Tracker.for_app(app).cleanup(now=NOW + 7 * DAY)
    assert report.total == 3 and not set(recent) & job_ids(db_url)


def test_a_task_retention_overrides_the_defaults(
    make_app: Callable[..., Celery], db_url: str
) -> None:
    app = make_app(tracked_retention_completed_days=7, tracked_retention_failed_days=30)

    def body() -> None: ...

    tracked_task(app=app, shared=False, name="short", retention=timedelta(hours=1))(body)
    tracked_task(app=app, shared=False, name="keep", retention={"failed": None, "completed": 90})(
        body
    )
    short_gone = seed(db_url, "completed", 3, 2 * timedelta(hours=1), task="short")
    short_gone += seed(db_url, "failed", 2, 2 * timedelta(hours=1), task="short")
    kept = seed(db_url, "failed", 3, 3000 * DAY, task="keep")  # kept forever
    kept += seed(db_url, "completed", 3, 60 * DAY, task="keep")
    keep_gone = seed(db_url, "completed", 2, 91 * DAY, task="keep")
    kept += seed(db_url, "completed", 2, 3 * DAY, task="other")
    other_gone = seed(db_url, "completed", 2, 8 * DAY, task="other")

    report = Tracker.for_app(app).cleanup()

    assert report.removed == {"completed": 7, "failed": 2, "cancelled": 0}
    assert job_ids(db_url) == set(kept)
    assert not set(short_gone + keep_gone + other_gone) & job_ids(db_url)


def test_keep_newest_and_every_rule_agree_with_the_pure_decision(
    make_app: Callable[..., Celery], db_url: str
) -> None:
    """Random rows: what survives is exactly what ``core.cleanup.sweeps`` does not admit."""
    app = make_app(tracked_retention_keep_newest=3, tracked_cleanup_batch_size=7)

    def body() -> None: ...

    tracked_task(app=app, shared=False, name="a", retention=2)(body)
    tracked_task(app=app, shared=False, name="b", retention={"cancelled": None})(body)
    rng = random.Random(13)
    rows, all_rows, all_events = [], [], []
    for _ in range(160):
        status = rng.choice(["completed", "failed", "cancelled", "pending", "retrying"])
        task, queue = rng.choice(["a", "b", "c"]), rng.choice(["q1", "q2", "q3"])
        ago = None if status in ("pending", "retrying") else timedelta(hours=rng.randint(1, 1200))
        [row], history = build(status, 1, ago, task=task, queue=queue, n_events=1)
        all_rows.append(row)
        all_events += history
        rows.append((row["id"], status, task, queue, row["finished_at"]))
    store(db_url, all_rows, all_events)
    # the expected boundaries, computed here: the 3rd newest per queue and ended status
    bounds: list[tuple[str, Boundary]] = []
    for status in ("completed", "failed", "cancelled"):
        for queue in ("q1", "q2", "q3"):
            group = sorted(
                ((f, i) for i, s, _, q, f in rows if s == status and q == queue and f),
                reverse=True,
            )
            if len(group) >= 3:
                bounds.append((status, Boundary(queue, group[2][0], group[2][1])))
    tracker = Tracker.for_app(app)
    tasks = [("a", 2), ("b", {"cancelled": None})]
    policy = policy_of(7 * DAY, 30 * DAY, tasks, keep_newest=3)
    found = sweeps(policy, NOW, bounds)

    def admitted(i: str, s: str, t: str, q: str, f: datetime | None) -> bool:
        return any(sw.admits(s, t, q, f, i) for sw in found)

    expected = {r[0] for r in rows if not admitted(*r)}
    assert len(expected) not in (0, len(rows)), "the data must exercise both sides"

    report = tracker.cleanup(now=NOW)

    assert job_ids(db_url) == expected
    assert report.total == len(rows) - len(expected)
    assert set(event_job_ids(db_url)) == expected


def test_two_cleanups_at_once_both_succeed_and_count_each_row_once(
    make_app: Callable[..., Celery], db_url: str
) -> None:
    seed(db_url, "completed", 1500, 8 * DAY)
    seed(db_url, "failed", 300, 31 * DAY)
    kept = seed(db_url, "completed", 50, DAY)
    apps = [make_app(tracked_cleanup_batch_size=100) for _ in range(2)]
    trackers = [Tracker.for_app(a) for a in apps]
    for t in trackers:
        t._services.store.get("warm-up")  # both connected before the start
    start = threading.Barrier(2)
    reports: list[CleanupReport] = []
    errors: list[BaseException] = []

    def one(tracker: Tracker) -> None:
        start.wait()
        try:
            reports.append(tracker.cleanup(now=NOW))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(t,)) for t in trackers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and len(reports) == 2
    assert sum(r.removed["completed"] for r in reports) == 1500
    assert sum(r.removed["failed"] for r in reports) == 300
    assert sum(r.events for r in reports) == 1800 * 3
    assert job_ids(db_url) == set(kept)


def test_the_next_enqueue_of_a_removed_key_creates_a_new_job_at_once(
    make_app: Callable[..., Celery], db_url: str, redis_url: str
) -> None:
    app = make_app()

    @tracked_task(app=app, shared=False, name="keyed", queue=QUEUE, idempotency_key="k:{n}")
    def keyed(n: int) -> None: ...

    first = keyed.enqueue(n=1)
    other = keyed.enqueue(n=2)
    assert first.created and other.created
    guard = redis.Redis.from_url(redis_url, decode_responses=True)
    key_1, key_2 = "celery_tracked:guard:keyed:k:1", "celery_tracked:guard:keyed:k:2"
    assert guard.get(key_1) == first.job_id, "the guard entry cleanup must drop"
    guard.set(key_2, "a-newer-job")  # the key's entry names another job now: it stays
    old = NOW - 8 * DAY
    ended = {"status": "completed", "finished_at": old}
    run_sql(db_url, update(jobs).values(**ended))

    report = Tracker.for_app(app).cleanup()

    assert report.total == 2 and report.guard_entries == 1
    assert guard.get(key_1) is None and guard.get(key_2) == "a-newer-job"
    started = time.monotonic()
    again = keyed.enqueue(n=1)
    took = time.monotonic() - started
    assert again.created and again.job_id != first.job_id
    # a stale entry stalled it for the guard's wait (seconds); < 3 s holds on a loaded machine
    assert took < 3.0, f"the next enqueue of a removed key took {took:.2f} s"
    guard.close()


def test_redis_down_leaves_the_guard_entries_to_expire_and_removes_the_rows(
    make_app: Callable[..., Celery], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(tracked_redis_url="redis://127.0.0.1:1/0")  # nothing listens there
    seed(db_url, "completed", 4, timedelta(minutes=5), key=lambda i: f"k{i}")
    report = Tracker.for_app(app).cleanup(now=NOW + 8 * DAY)
    assert report.total == 4 and report.guard_entries == 0
    assert job_ids(db_url) == set()
    assert "could not drop 4 guard entries" in caplog.text


def test_the_cleanup_logs_what_it_removed(
    make_app: Callable[..., Celery], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    seed(db_url, "completed", 2, 8 * DAY)
    caplog.set_level("INFO", logger="celery_tracked")
    report = Tracker.for_app(app).cleanup()
    [record] = [r for r in caplog.records if "cleanup removed" in r.getMessage()]
    assert "removed 2 jobs (completed 2, failed 0, cancelled 0), 6 events" in record.getMessage()
    assert record.cleanup == report.as_dict()  # type: ignore[attr-defined]


def test_a_failed_batch_removes_nothing_and_raises_a_store_error(
    make_app: Callable[..., Celery], db_url: str
) -> None:
    app = make_app(tracked_cleanup_batch_size=2)
    old = seed(db_url, "completed", 4, 8 * DAY, n_events=0)
    run_sql(db_url, text("DROP TABLE background_job_events"))
    with pytest.raises(StoreError, match="tracked migrate"):
        Tracker.for_app(app).cleanup()
    assert job_ids(db_url) == set(old), "the batch's job rows were rolled back with it"
