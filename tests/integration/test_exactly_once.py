"""Exactly-once effects on PostgreSQL and SQLite, in-process: ``enqueue_in`` commits or
rolls back with the caller's transaction; ``self.transaction()`` writes commit with the
completion, and nothing of a failed or retried attempt remains (runs inline: ``apply``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from celery_tracked import JobStatus, NotInAStep, tracked_task
from tests.conftest import wait_for

from .conftest import AppFactory, queue_messages, tracker_of
from .ledger import ledger, ledger_table


class Boom(Exception):
    pass


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    with ledger_table(database_url) as made:
        yield made


def test_enqueue_in_follows_the_callers_transaction(
    make_app: AppFactory, engine: Engine, broker: redis.Redis
) -> None:
    app = make_app()

    @tracked_task(app=app, shared=False, queue="tx_q", idempotency_key="{x}")
    def job(x: str) -> str:
        return x

    with Session(engine) as session:
        job.enqueue_in(session, x="gone")
        session.rollback()
    assert queue_messages(broker, "tx_q") == []
    with Session(engine) as session:  # closed without a commit, then used again
        job.enqueue_in(session, x="closed")
        session.close()
        session.execute(text("SELECT 1"))
        session.commit()
    assert queue_messages(broker, "tx_q") == []
    with Session(engine) as session:
        made = job.enqueue_in(session, x="gone")
        assert made.created and queue_messages(broker, "tx_q") == []
        session.commit()
    assert len(queue_messages(broker, "tx_q")) == 1
    found = tracker_of(app).get_job(made.job_id)
    assert found is not None and found.published_at is not None
    assert [e.event for e in tracker_of(app).history(made.job_id)] == ["enqueued"]


def run_ledger_task(app: Celery, engine: Engine) -> Any:
    seen: list[int] = []

    @tracked_task(app=app, shared=False, bind=True, queue="tx_q", max_attempts=2, backoff_ms=1)
    def add(self: Any, k: str, fail: str = "") -> int:
        seen.append(self.request.retries)
        with self.transaction() as conn:
            conn.execute(text("UPDATE ledger SET n = n + 1 WHERE k = :k"), {"k": k})
        if fail == "always" or (fail == "first" and self.request.retries == 0):
            raise Boom(k)
        return len(seen)

    return add


def test_the_bodys_writes_commit_with_the_completion_only(
    make_app: AppFactory, engine: Engine
) -> None:
    app = make_app(task_eager_propagates=True)
    add = run_ledger_task(app, engine)
    done = add.apply(kwargs={"k": "a"})
    assert tracker_of(app).get_job(done.id).status is JobStatus.COMPLETED
    retried = add.apply(kwargs={"k": "b", "fail": "first"})  # attempt 1's write is undone
    assert tracker_of(app).get_job(retried.id).attempts_made == 2
    with pytest.raises(Boom):
        add.apply(kwargs={"k": "c", "fail": "always"})
    assert ledger(engine) == {"a": 1, "b": 1, "c": 0}
    with pytest.raises(NotInAStep), add.transaction():
        pass


def test_a_job_enqueued_in_the_bodys_transaction_follows_its_completion(
    make_app: AppFactory, engine: Engine, broker: redis.Redis
) -> None:
    app = make_app(task_eager_propagates=True)

    @tracked_task(app=app, shared=False, queue="outbox_q", idempotency_key="{x}")
    def webhook(x: str) -> str:
        return x

    @tracked_task(app=app, shared=False, bind=True, queue="tx_q", max_attempts=1)
    def ship(self: Any, x: str, fail: bool = False) -> str:
        with self.transaction() as conn:
            made = webhook.enqueue_in(conn, x=x)
        if fail:
            raise Boom(x)
        return str(made.job_id)

    sent = ship.apply(kwargs={"x": "yes"}).get()
    with pytest.raises(Boom):
        ship.apply(kwargs={"x": "no", "fail": True})
    tracker = tracker_of(app)
    found = tracker.get_job(sent)
    assert found is not None
    wait_for(lambda: len(queue_messages(broker, "outbox_q")) == 1, timeout=10)
    assert [j.id for j in tracker.jobs(job_type=webhook.tracked_job_type)] == [sent]


def test_successors_are_created_with_a_completion_in_the_bodys_transaction(
    make_app: AppFactory, engine: Engine, broker: redis.Redis
) -> None:
    app = make_app(task_eager_propagates=True)

    @tracked_task(app=app, shared=False, queue="next_q")
    def after(k: str) -> str:
        return k

    @tracked_task(app=app, shared=False, bind=True, queue="tx_q", max_attempts=1)
    def step(self: Any, k: str) -> str:
        with self.transaction() as conn:
            conn.execute(text("UPDATE ledger SET n = n + 1 WHERE k = :k"), {"k": k})
        return str(self.then(after, k))

    successor = step.apply(kwargs={"k": "a"}).get()
    found = tracker_of(app).get_job(successor)
    assert found is not None and found.status is JobStatus.PENDING
    assert ledger(engine)["a"] == 1
    wait_for(lambda: len(queue_messages(broker, "next_q")) == 1, timeout=10)


EXITS_AFTER_COMMIT = """
import sys
from celery import Celery
from sqlalchemy import create_engine
from celery_tracked import tracked_task

database_url, redis_url = sys.argv[1:3]
app = Celery("exiting", broker=redis_url, set_as_current=False)
app.conf.tracked_database_url = database_url
app.conf.tracked_redis_url = redis_url

@tracked_task(app=app, shared=False, queue="exit_q")
def job(x: str) -> str:
    return x

engine = create_engine(database_url)
with engine.begin() as conn:
    made = job.enqueue_in(conn, x="bye")
print(made.job_id)
"""


def test_a_process_exiting_right_after_its_commit_publishes_first(
    make_app: AppFactory, database_url: str, redis_url: str, broker: redis.Redis
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", EXITS_AFTER_COMMIT, database_url, redis_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    job_id = done.stdout.strip().splitlines()[-1]
    assert len(queue_messages(broker, "exit_q")) == 1  # published before the exit
    found = tracker_of(make_app()).get_job(job_id)
    assert found is not None and found.published_at is not None


def test_enqueue_in_takes_a_scoped_session(
    make_app: AppFactory, engine: Engine, broker: redis.Redis
) -> None:
    app = make_app()

    @tracked_task(app=app, shared=False, queue="scoped_q")
    def job(x: str) -> str:
        return x

    scoped = scoped_session(sessionmaker(engine))  # as Flask-SQLAlchemy's ``db.session``
    made = job.enqueue_in(scoped, x="s")
    assert queue_messages(broker, "scoped_q") == []
    scoped.commit()
    scoped.remove()
    assert made.created and len(queue_messages(broker, "scoped_q")) == 1
