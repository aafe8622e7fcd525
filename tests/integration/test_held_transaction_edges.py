"""``self.transaction()`` at its edges, in-process (``apply``): a held transaction the
server ended or the body's own error aborted fails the attempt (counted, bounded by
``max_attempts``); nested blocks continue one transaction, each inner one a savepoint."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from celery_tracked import JobStatus, TransactionFailed, tracked_task

from .conftest import AppFactory, tracker_of
from .ledger import ledger, ledger_table

UP = text("UPDATE ledger SET n = n + 1 WHERE k = :k")
PG_ONLY = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


class Boom(Exception):
    pass


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    with ledger_table(database_url) as made:
        yield made


def assert_failed_counted(app: Any, job_id: str, attempts: int, cause: str) -> None:
    found = tracker_of(app).get_job(job_id)
    assert found is not None and found.status is JobStatus.FAILED
    assert found.attempts_made == attempts
    assert found.error_type == "TransactionFailed"
    assert found.error_message is not None
    assert "the body's transaction failed" in found.error_message
    assert cause in found.error_message


@PG_ONLY
def test_a_transaction_aborted_by_the_bodys_caught_error_fails_the_attempt(
    make_app: AppFactory, engine: Engine
) -> None:
    app = make_app(task_eager_propagates=True)
    runs: list[int] = []

    @tracked_task(app=app, shared=False, bind=True, queue="tx_q", max_attempts=3, backoff_ms=1)
    def dup(self: Any) -> None:
        runs.append(self.request.retries)
        with self.transaction() as conn:
            conn.execute(UP, {"k": "a"})
            with contextlib.suppress(IntegrityError):  # swallowed: the transaction is aborted
                conn.execute(text("INSERT INTO ledger (k, n) VALUES ('a', 0)"))

    with pytest.raises(TransactionFailed):
        dup.apply(task_id="dup-1")
    assert runs == [0, 1, 2]  # each attempt counted, then failed
    assert_failed_counted(app, "dup-1", 3, "aborted")
    assert ledger(engine)["a"] == 0


@PG_ONLY
def test_a_transaction_the_server_ended_fails_the_attempt(
    make_app: AppFactory, engine: Engine
) -> None:
    app = make_app(task_eager_propagates=True)
    runs: list[int] = []

    @tracked_task(app=app, shared=False, bind=True, queue="tx_q", max_attempts=2, backoff_ms=1)
    def idle(self: Any) -> None:
        runs.append(self.request.retries)
        with self.transaction() as conn:
            conn.execute(text("SET idle_in_transaction_session_timeout = 100"))
            conn.execute(UP, {"k": "a"})
        time.sleep(0.5)  # held idle past the server's timeout: it ends the session

    with pytest.raises(TransactionFailed):
        idle.apply(task_id="idle-1")
    assert runs == [0, 1]
    assert_failed_counted(app, "idle-1", 2, "idle-in-transaction")
    assert ledger(engine)["a"] == 0


def test_nested_blocks_share_one_transaction_and_an_inner_error_undoes_its_own_writes(
    make_app: AppFactory, engine: Engine
) -> None:
    app = make_app(task_eager_propagates=True)

    @tracked_task(app=app, shared=False, bind=True, queue="tx_q", max_attempts=1)
    def nested(self: Any) -> str:
        with self.transaction() as outer:
            outer.execute(UP, {"k": "a"})
            with self.transaction() as inner:
                assert inner is outer
                inner.execute(UP, {"k": "a"})  # the same row: no wait on itself
                inner.execute(UP, {"k": "b"})
            with contextlib.suppress(Boom), self.transaction() as failing:
                failing.execute(UP, {"k": "c"})  # undone: only this block's write
                raise Boom()
        return "ok"

    assert nested.apply(task_id="nested-1").get() == "ok"
    found = tracker_of(app).get_job("nested-1")
    assert found is not None and found.status is JobStatus.COMPLETED
    assert ledger(engine) == {"a": 2, "b": 1, "c": 0}


def test_an_outer_block_that_raises_undoes_its_inner_blocks(
    make_app: AppFactory, engine: Engine
) -> None:
    app = make_app(task_eager_propagates=True)

    @tracked_task(app=app, shared=False, bind=True, queue="tx_q", max_attempts=1)
    def outer_fails(self: Any) -> str:
        try:
            with self.transaction() as outer:
                with self.transaction() as inner:
                    inner.execute(UP, {"k": "b"})
                outer.execute(UP, {"k": "a"})
                raise Boom()
        except Boom:
            pass
        with self.transaction() as again:  # a fresh transaction
            again.execute(UP, {"k": "c"})
        return "ok"

    assert outer_fails.apply(task_id="outer-1").get() == "ok"
    assert ledger(engine) == {"a": 0, "b": 0, "c": 1}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_on_sqlite_progress_and_log_wait_for_no_lock_of_their_own_body(
    make_app: AppFactory, engine: Engine
) -> None:
    app = make_app(task_eager_propagates=True)

    @tracked_task(app=app, shared=False, bind=True, queue="tx_q", max_attempts=1)
    def progress_after(self: Any) -> bool:
        assert self.log("before the block")
        with self.transaction() as conn:
            conn.execute(UP, {"k": "a"})
        self.set_progress(50)  # not written: the body's transaction holds the write lock
        return bool(self.log("after the block"))

    started = time.monotonic()
    assert progress_after.apply(task_id="sq-1").get() is False
    assert time.monotonic() - started < 5  # no wait on the 30 s busy_timeout
    found = tracker_of(app).get_job("sq-1")
    assert found is not None and found.status is JobStatus.COMPLETED
    logged = [e.message for e in tracker_of(app).history("sq-1") if e.event == "log"]
    assert logged == ["before the block"]
    assert ledger(engine)["a"] == 1
