"""``enqueue_in`` under concurrent producers on MariaDB and PostgreSQL, under both
READ COMMITTED and REPEATABLE READ: a key conflict never aborts the caller's transaction
(issue 22, item 1). Each producer is a thread with its own connection and transaction."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from celery_tracked import tracked_task
from celery_tracked.store import migrate
from tests.conftest import wait_for

from .conftest import tracker_of

ROUNDS = 4


@pytest.fixture(params=["mariadb", "postgres"])
def tracking_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    migrate.upgrade(url)
    return url


@pytest.fixture(params=["READ COMMITTED", "REPEATABLE READ"])
def engine(request: pytest.FixtureRequest, tracking_url: str) -> Iterator[Engine]:
    made = create_engine(tracking_url, isolation_level=request.param)
    with made.begin() as conn:
        conn.execute(text("CREATE TABLE orders (k VARCHAR(50) PRIMARY KEY)"))
    yield made
    made.dispose()


@pytest.fixture
def app(tracking_url: str, redis_url: str) -> Iterator[Celery]:
    made = Celery("concurrent", broker=redis_url, set_as_current=False)
    made.conf.update(
        tracked_database_url=tracking_url,
        tracked_redis_url=redis_url,
        broker_connection_retry_on_startup=False,
    )
    yield made
    tracker_of(made).close()
    made.close()


def orders(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return {k for (k,) in conn.execute(text("SELECT k FROM orders"))}


def waiting(engine: Engine) -> int:
    """Sessions of this database waiting on a lock (a row lock or a named lock)."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            query = (
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        else:
            query = (
                "SELECT count(*) FROM information_schema.PROCESSLIST"
                " WHERE DB = DATABASE() AND (INFO LIKE 'INSERT%%' OR STATE = 'User lock')"
            )
        return int(conn.execute(text(query)).scalar_one())


def producer(
    engine: Engine, task: Any, order: str, key: str, before_end: Callable[[], None], commit: bool
) -> dict[str, Any]:
    outcome: dict[str, Any] = {"order": order}
    try:
        with Session(engine) as session:
            session.execute(text("INSERT INTO orders (k) VALUES (:k)"), {"k": order})
            try:
                outcome["result"] = task.enqueue_in(session, x=key)
            except Exception as exc:  # what the caller sees
                outcome["enqueue_error"] = repr(exc)
            before_end()
            if commit:
                session.commit()
            else:
                session.rollback()
    except Exception as exc:
        outcome["commit_error"] = repr(exc)
    return outcome


def one_round(engine: Engine, job: Any, r: int, outcomes: list[dict[str, Any]]) -> None:
    """The first producer holds the key ``key{r}`` until the two others wait, then rolls
    back; the two others commit."""
    key, release, first_in = f"key{r}", threading.Event(), threading.Event()

    def hold() -> None:
        first_in.set()
        release.wait(30)

    def first() -> None:
        outcomes.append(producer(engine, job, f"gone{r}", key, hold, commit=False))

    def later(i: int) -> None:
        outcomes.append(producer(engine, job, f"o{r}_{i}", key, lambda: None, commit=True))

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert first_in.wait(30)
    threads += [threading.Thread(target=later, args=(i,)) for i in range(2)]
    for t in threads[1:]:
        t.start()
    wait_for(lambda: waiting(engine) >= 2, timeout=30)
    release.set()
    for t in threads:
        t.join(60)


def test_producers_waiting_on_a_key_whose_first_holder_rolls_back(
    app: Celery, engine: Engine
) -> None:
    """Three producers on one key, the first rolls back: the two waiting ones each commit
    their own order, and exactly one of them made the job (InnoDB chose a deadlock victim
    among them and rolled its whole transaction back, before the fix)."""

    @tracked_task(app=app, shared=False, queue="cq", idempotency_key="{x}")
    def job(x: str) -> str:
        return x

    outcomes: list[dict[str, Any]] = []
    for r in range(ROUNDS):
        one_round(engine, job, r, outcomes)
    failed = [o for o in outcomes if "enqueue_error" in o or "commit_error" in o]
    assert failed == []
    committed = {o["order"] for o in outcomes if not o["order"].startswith("gone")}
    assert orders(engine) == committed  # nobody's own rows lost
    tracker = tracker_of(app)
    for r in range(ROUNDS):
        made = [o["result"] for o in outcomes if o["order"].startswith(f"o{r}_")]
        assert sorted(m.created for m in made) == [False, True]
        assert made[0].job_id == made[1].job_id
        assert tracker.get_job(made[0].job_id) is not None


def test_a_key_committed_after_the_callers_first_read(app: Celery, engine: Engine) -> None:
    """REPEATABLE READ: the caller read before another producer committed the key; its
    enqueue_in returns that job (it raised "collided with a job now gone", before)."""

    @tracked_task(app=app, shared=False, queue="cq", idempotency_key="{x}")
    def job(x: str) -> str:
        return x

    for r in range(ROUNDS):
        with Session(engine) as session:
            session.execute(text("SELECT count(*) FROM orders")).scalar_one()  # the snapshot
            with Session(engine) as other:
                made = job.enqueue_in(other, x=f"late{r}")
                other.commit()
            session.execute(text("INSERT INTO orders (k) VALUES (:k)"), {"k": f"late{r}"})
            found = job.enqueue_in(session, x=f"late{r}")
            session.commit()
        assert (found.job_id, found.created) == (made.job_id, False)
    assert orders(engine) == {f"late{r}" for r in range(ROUNDS)}
