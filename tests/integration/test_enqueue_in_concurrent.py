"""``enqueue_in`` under concurrent producers on MariaDB and PostgreSQL, under both
READ COMMITTED and REPEATABLE READ: a key conflict never aborts the caller's transaction
(issue 22, item 1). Each producer is a thread with its own connection and transaction."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import Engine, create_engine, insert, text
from sqlalchemy.orm import Session

from celery_tracked import tracked_task
from celery_tracked.core.jobs import NEW_JOB_DEFAULTS, utcnow
from celery_tracked.store import locks, migrate
from celery_tracked.store.models import jobs
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


def key_locks_free(engine: Engine, job: Any, keys: list[str]) -> bool:
    """MariaDB: no key lock of ``keys`` is held any more (by any session)."""
    with engine.connect() as conn:
        for key in keys:
            row = {"job_type": job.tracked_job_type, "idempotency_key": key, "id": ""}
            query = text("SELECT IS_FREE_LOCK(:n)")
            if conn.execute(query, {"n": locks.lock_name(row)}).scalar_one() != 1:
                return False
    return True


@pytest.mark.parametrize("end", ["commit", "rollback", "close", "connection"])
def test_the_key_lock_ends_with_the_callers_transaction(
    app: Celery, engine: Engine, end: str
) -> None:
    """MariaDB: the key's named lock is held by the caller's session until its transaction
    ends, however it ends (a pooled connection must not keep it)."""
    if engine.dialect.name not in ("mysql", "mariadb"):
        pytest.skip("a MariaDB/MySQL lock")

    @tracked_task(app=app, shared=False, queue="cq", idempotency_key="{x}")
    def job(x: str) -> str:
        return x

    if end == "connection":
        with engine.connect() as conn:
            job.enqueue_in(conn, x="k")
            assert not key_locks_free(engine, job, ["k"])
            conn.commit()
    else:
        session = Session(engine)
        job.enqueue_in(session, x="k")
        assert not key_locks_free(engine, job, ["k"])
        getattr(session, end)()
        session.close()
    assert key_locks_free(engine, job, ["k"])


def test_a_deadlock_victim_cannot_commit_in_silence(app: Celery, engine: Engine) -> None:
    """MariaDB: a deadlock that is not ours to avoid (another session holds the key's
    uncommitted row and waits for a row the caller holds) rolls the caller's whole
    transaction back: its enqueue_in raises, and its commit() raises too, never committing
    nothing in silence."""
    if engine.dialect.name not in ("mysql", "mariadb"):
        pytest.skip("InnoDB's deadlock victim")

    @tracked_task(app=app, shared=False, queue="cq", idempotency_key="{x}")
    def job(x: str) -> str:
        return x

    other = engine.connect()  # another session: many rows, and the key uncommitted
    other.execute(text("INSERT INTO orders (k) VALUES " + ",".join(f"('f{i}')" for i in range(50))))
    now = utcnow()
    row = {**NEW_JOB_DEFAULTS, "id": "other", "queue_name": "cq", "status": "pending"}
    row.update(job_type=job.tracked_job_type, task_name=job.name, celery_task_id="other")
    row.update(payload_json="{}", max_attempts=1, idempotency_key="dead")
    other.execute(insert(jobs).values(created_at=now, updated_at=now), row)
    outcome: dict[str, Any] = {}

    def caller() -> None:
        outcome.update(producer(engine, job, "mine", "dead", lambda: None, commit=True))

    thread = threading.Thread(target=caller)
    thread.start()
    wait_for(lambda: waiting(engine) >= 1, timeout=30)
    try:  # the caller's own new row: a wait cycle, InnoDB picks the lighter transaction
        other.execute(text("SELECT k FROM orders WHERE k = 'mine' FOR UPDATE")).all()
    except Exception:
        outcome["other_victim"] = True
    finally:
        other.rollback()
        other.close()
    thread.join(60)
    if outcome.get("other_victim"):
        pytest.skip("InnoDB chose the other session as the victim")
    assert "rolled your whole transaction back" in outcome["enqueue_error"]
    assert "commit_error" in outcome
    assert "mine" not in orders(engine)


def test_two_transactions_taking_two_keys_in_opposite_orders(app: Celery, engine: Engine) -> None:
    """MariaDB: A takes k1 then k2, B takes k2 then k1. The database ends one named-lock
    wait (a deadlock of named locks ends only that statement): that enqueue_in raises,
    its transaction goes on and commits its own rows; the other gets both keys."""
    if engine.dialect.name not in ("mysql", "mariadb"):
        pytest.skip("a MariaDB/MySQL lock")

    @tracked_task(app=app, shared=False, queue="cq", idempotency_key="{x}")
    def job(x: str) -> str:
        return x

    both_hold = threading.Barrier(2)
    outcomes: dict[str, dict[str, Any]] = {}

    def caller(name: str, first: str, second: str) -> None:
        outcome: dict[str, Any] = {}
        with Session(engine) as session:
            session.execute(text("INSERT INTO orders (k) VALUES (:k)"), {"k": name})
            outcome["first"] = job.enqueue_in(session, x=first)
            both_hold.wait(30)
            try:
                outcome["second"] = job.enqueue_in(session, x=second)
            except Exception as exc:
                outcome["error"] = str(exc)
            session.commit()
        outcomes[name] = outcome

    threads = [
        threading.Thread(target=caller, args=("A", "k1", "k2")),
        threading.Thread(target=caller, args=("B", "k2", "k1")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    errors = [o["error"] for o in outcomes.values() if "error" in o]
    assert len(errors) == 1 and "waits for a key this one holds" in errors[0]
    assert orders(engine) == {"A", "B"}
    tracker = tracker_of(app)
    for o in outcomes.values():
        assert tracker.get_job(o["first"].job_id) is not None


def test_enqueue_in_the_bodys_transaction_commits_with_its_completion(
    app: Celery, engine: Engine
) -> None:
    """``self.transaction()`` on MariaDB and PostgreSQL: a job enqueued in the body's
    transaction exists once the run completed (and its key lock is gone with it), and not
    after a failed run."""
    app.conf.task_eager_propagates = True

    @tracked_task(app=app, shared=False, queue="cq", idempotency_key="{x}")
    def webhook(x: str) -> str:
        return x

    @tracked_task(app=app, shared=False, bind=True, queue="cq", max_attempts=1)
    def ship(self: Any, x: str, fail: bool = False) -> str:
        with self.transaction() as conn:
            made = webhook.enqueue_in(conn, x=x)
        if fail:
            raise RuntimeError(x)
        return str(made.job_id)

    sent = ship.apply(kwargs={"x": "yes"}).get()
    with pytest.raises(RuntimeError):
        ship.apply(kwargs={"x": "no", "fail": True})
    tracker = tracker_of(app)
    assert [j.id for j in tracker.jobs(job_type=webhook.tracked_job_type)] == [sent]
    if engine.dialect.name in ("mysql", "mariadb"):
        assert key_locks_free(engine, webhook, ["yes", "no"])
