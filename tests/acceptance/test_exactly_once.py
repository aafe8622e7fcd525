"""Acceptance: exactly-once effects (issue 17). A job created in the caller's transaction
(``enqueue_in``), and a body's writes committed with its fenced completion
(``self.transaction()``), under SIGKILL and SIGSTOP of real pool children."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import HERE, worker_environ
from effects_tasks import LEDGER_DDL
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from celery_tracked import JobStatus, NotInTrackingDatabase, NotTransactional
from tests.conftest import wait_for

FAST_RELAY = {
    "CELERY_TRACKED_RELAY_GRACE_SECONDS": "1",
    "CELERY_TRACKED_RELAY_INTERVAL_SECONDS": "1",
}

#: A producer that commits its transaction with ``enqueue_in`` and is SIGKILLed by its own
#: ``after_commit`` listener, registered before celery-tracked's: committed, never published.
PRODUCER = """
import os, signal, sys
from sqlalchemy import create_engine, event
from sqlalchemy.orm import Session
from tracked_app import config_from_env, create_app

app = create_app(config_from_env())
engine = create_engine(os.environ["CELERY_TRACKED_DATABASE_URL"])
with Session(engine) as session:
    event.listen(session, "after_commit", lambda s: os.kill(os.getpid(), signal.SIGKILL))
    print(app.tasks["acc.keyed"].enqueue_in(session, x=sys.argv[1]).job_id, flush=True)
    session.commit()
"""


@pytest.fixture
def engine(env: Any) -> Iterator[Engine]:
    made = create_engine(env.database_url)
    yield made
    made.dispose()


@pytest.fixture
def ledger(engine: Engine) -> Engine:
    with engine.begin() as conn:
        conn.execute(text(LEDGER_DDL))
    return engine


def test_a_committed_enqueue_runs_once(env: Any, engine: Engine, start_worker: Any) -> None:
    keyed = env.task("acc.keyed")
    with Session(engine) as session:
        created = keyed.enqueue_in(session, x="commit")
        again = keyed.enqueue_in(session, x="commit")  # the same transaction: the same job
        assert created.created and again == (created.job_id, JobStatus.PENDING, False)
        assert env.broker_messages() == []  # nothing is published before the commit
        session.commit()
    assert [m["headers"]["id"] for m in env.broker_messages()] == [created.job_id]
    start_worker()
    job = env.wait_status(created.job_id, "completed", timeout=30)
    assert job.published_at is not None and env.ran(created.job_id) == 1
    assert keyed.enqueue(x="commit") == (created.job_id, JobStatus.COMPLETED, False)


def test_a_rollback_leaves_nothing_and_the_key_is_free_at_once(env: Any, engine: Engine) -> None:
    keyed = env.task("acc.keyed")
    with Session(engine) as session:
        gone = keyed.enqueue_in(session, x="rollback").job_id
        session.rollback()
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 0
    assert env.sql("SELECT count(*) FROM background_job_events")[0][0] == 0
    assert env.broker_messages() == []
    with Session(engine) as session:  # a transaction right after gets a new job
        fresh = keyed.enqueue_in(session, x="rollback")
        session.commit()
    assert fresh.created and fresh.job_id != gone
    assert keyed.enqueue(x="rollback") == (fresh.job_id, JobStatus.PENDING, False)
    with Session(engine) as session:  # an ordinary enqueue right after a rollback creates
        keyed.enqueue_in(session, x="rolled-back")
        session.rollback()
    assert keyed.enqueue(x="rolled-back").created
    with engine.connect() as conn:  # a Connection: published once its commit is visible
        other = keyed.enqueue_in(conn, x="connection")
        conn.commit()
    wait_for(lambda: env.tracker.get_job(other.job_id).published_at is not None, timeout=10)
    with engine.connect() as conn:
        keyed.enqueue_in(conn, x="connection-rolled-back")
        conn.rollback()
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 3
    assert len(env.broker_messages()) == 3


def test_refusals_are_loud_and_leave_nothing(env: Any, tmp_path: Path) -> None:
    other = create_engine(f"sqlite:///{tmp_path / 'other.sqlite3'}")
    with Session(other) as session, pytest.raises(NotInTrackingDatabase):
        env.task("acc.keyed").enqueue_in(session, x="elsewhere")
    other.dispose()
    engine = create_engine(env.database_url)
    with Session(engine) as session, pytest.raises(NotTransactional, match="key lifetime"):
        env.task("acc.throttled").enqueue_in(session, x="t")
    engine.dispose()
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 0


def test_eight_concurrent_transactions_with_one_key_make_one_job(env: Any, engine: Engine) -> None:
    keyed, results, errors = env.task("acc.keyed"), [], []
    start = threading.Barrier(8)

    def producer() -> None:
        try:
            with Session(engine) as session:
                start.wait(timeout=10)
                result = keyed.enqueue_in(session, x="race")
                time.sleep(0.2)  # the others' inserts wait for this transaction
                session.commit()
            results.append(result)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=producer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert len({r.job_id for r in results}) == 1 and len(results) == 8
    assert sum(r.created for r in results) == 1
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 1
    assert len(env.broker_messages()) == 1


def test_a_producer_killed_after_its_commit_is_relayed_and_runs_once(
    env: Any, start_worker: Any, start_beat: Any
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PRODUCER, "killed"],
        cwd=str(HERE),
        env=worker_environ(env.config),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    job_id = proc.stdout.strip()
    rows = env.sql("SELECT status, published_at FROM background_jobs WHERE id = :i", i=job_id)
    assert rows == [("pending", None)] and env.broker_messages() == []
    start_worker(environ=FAST_RELAY)
    start_beat(FAST_RELAY)
    job = env.wait_status(job_id, "completed", timeout=60)
    assert "relayed" in [e.event for e in env.tracker.history(job_id)]
    assert job.attempts_made == 1 and env.ran(job_id) == 1


def ledger_of(env: Any) -> dict[str, int]:
    return dict(env.sql("SELECT k, n FROM ledger"))


def completed_events(env: Any) -> dict[str, int]:
    rows = env.sql(
        "SELECT job_id, count(*) FROM background_job_events WHERE event = 'completed' "
        "GROUP BY job_id"
    )
    return dict(rows)


@pytest.mark.parametrize("lease_seconds", [2.0])
def test_a_write_with_the_completion_survives_kill_and_pause_exactly_once(
    env: Any, ledger: Engine, start_worker: Any
) -> None:
    """SIGKILL after the write, before the completion: the redelivery writes it once;
    SIGSTOP past the lease while a copy takes over, then SIGCONT: written once."""
    with ledger.begin() as conn:
        conn.execute(text("INSERT INTO ledger (k) VALUES ('killed'), ('paused')"))
    start_worker(concurrency=2)
    task = env.task("acc.ledger")
    killed = task.enqueue(k="killed", hold=60).job_id
    pid = int(wait_for(lambda: env.redis.get(f"wrote:{killed}"), timeout=20, what="the write"))
    os.kill(pid, signal.SIGKILL)
    job = env.wait_status(killed, "completed", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED and job.attempts_made == 2

    paused = task.enqueue(k="paused", hold=60).job_id
    pid = int(wait_for(lambda: env.redis.get(f"wrote:{paused}"), timeout=20, what="the write"))
    os.kill(pid, signal.SIGSTOP)
    try:
        env.redeliver("acc.ledger", paused, k="paused")
        wait_for(lambda: env.ran(paused) >= 2, timeout=30, what="the copy to take over")
    finally:
        os.kill(pid, signal.SIGCONT)
        env.redis.set(f"go:{paused}", 1)
    job = env.wait_status(paused, "completed", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED and job.attempts_made == 2
    assert ledger_of(env) == {"killed": 1, "paused": 1}
    assert completed_events(env) == {killed: 1, paused: 1}


JOBS = 200
KILLS = 25


def test_two_hundred_jobs_with_random_kills_write_each_increment_once(
    env: Any, ledger: Engine, start_worker: Any
) -> None:
    keys = [f"j{i}" for i in range(JOBS)]
    with ledger.begin() as conn:
        conn.execute(text("INSERT INTO ledger (k) VALUES (:k)"), [{"k": k} for k in keys])
    victims = set(random.Random(17).sample(keys, KILLS))
    start_worker(concurrency=4)
    task = env.task("acc.ledger")
    started = time.monotonic()
    ids = {k: task.enqueue(k=k, hold=30 if k in victims else 0).job_id for k in keys}
    alive, deadline = set(victims), time.monotonic() + 90
    while alive and time.monotonic() < deadline:  # each victim once it has written
        for k in sorted(alive):
            pid = env.redis.get(f"wrote:{ids[k]}")
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
                alive.discard(k)
        time.sleep(0.02)
    assert not alive, f"victims that never wrote: {sorted(alive)}"
    wait_for(
        lambda: (
            env.sql("SELECT count(*) FROM background_jobs WHERE status = 'completed'")[0][0] == JOBS
        ),
        timeout=120,
        what="every job to complete",
    )
    print(f"{JOBS} jobs, {KILLS} SIGKILLs: {time.monotonic() - started:.1f} s")
    assert ledger_of(env) == dict.fromkeys(keys, 1)
    assert completed_events(env) == dict.fromkeys(ids.values(), 1)
    for k in victims:
        assert env.tracker.get_job(ids[k]).attempts_made == 2
