"""Every statement written once: the Core statements compile for PostgreSQL and SQLite
without a server, and each move's WHERE clause carries its sources and its fence."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import psycopg

from celery_tracked.store import inserts, selects
from celery_tracked.store import statements as sql
from celery_tracked.store import transitions as moves

PG = psycopg.dialect()
SQLITE = sqlite.dialect()

MOVES = {
    m.name: m
    for m in (
        moves.CLAIM,
        moves.TAKE_OVER,
        moves.FAIL_LOST,
        moves.CANCEL,
        moves.COMPLETE,
        moves.RETRYING,
        moves.FAIL,
        moves.RENEW,
        moves.RELEASE,
        moves.RETRY_DEAD,
        moves.FAIL_DEAD,
        moves.CANCEL_DEAD,
    )
}

#: move → (source statuses, target status or None, fenced by the attempt, by a lapsed lease)
EXPECTED: dict[str, tuple[set[str], str | None, bool, bool]] = {
    "claim": ({"pending", "retrying"}, "processing", False, False),
    "take_over": ({"processing"}, "processing", True, True),
    "fail_lost": ({"processing"}, "failed", True, True),
    "cancel": ({"pending", "retrying"}, "cancelled", False, False),
    "complete": ({"processing"}, "completed", True, False),
    "retrying": ({"processing"}, "retrying", True, False),
    "fail": ({"processing"}, "failed", True, False),
    "renew": ({"processing"}, None, True, False),
    "release": ({"processing"}, None, True, False),
    "retry_dead": ({"processing"}, "retrying", True, True),
    "fail_dead": ({"processing"}, "failed", True, True),
    "cancel_dead": ({"processing"}, "cancelled", True, True),
}


def where_of(text: str) -> str:
    return text.split(" WHERE ", 1)[1]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_move_is_one_conditional_update(name: str) -> None:
    sources, target, attempt_fence, lapsed_fence = EXPECTED[name]
    compiled = sql.move_update(MOVES[name]).compile(dialect=SQLITE)
    params: dict[str, Any] = compiled.params
    statuses = {v for k, v in params.items() if k.startswith("status_")}
    assert statuses == sources
    assert params.get("status") == target
    where = where_of(str(compiled))
    assert where.startswith("background_jobs.id = ?")
    assert ("background_jobs.attempts_made = ?" in where) is attempt_fence
    assert ("background_jobs.locked_until < strftime(" in where) is lapsed_fence
    assert ("background_jobs.locked_by = ?" in where) is lapsed_fence


def test_a_takeover_never_exceeds_the_attempts() -> None:
    where = where_of(str(sql.move_update(moves.TAKE_OVER).compile(dialect=SQLITE)))
    assert "background_jobs.attempts_made < background_jobs.max_attempts" in where


def test_a_lost_last_attempt_is_recorded_as_worker_lost() -> None:
    params = sql.move_update(moves.FAIL_LOST).compile(dialect=SQLITE).params
    assert params["error_type"] == "WorkerLost"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_postgresql_cte_is_the_same_update_and_its_event(name: str) -> None:
    move = MOVES[name]
    text = str(sql.move_cte(move).compile(dialect=PG))
    update = str(sql.move_update(move).compile(dialect=PG))
    assert text.startswith("WITH moved AS")
    assert where_of(update) in text  # the same WHERE, fence included
    assert "RETURNING background_jobs.id, background_jobs.attempts_made" in text
    has_event = move.event is not None and move.target is not None
    assert ("INSERT INTO background_job_events" in text) is has_event
    assert text.rstrip().endswith("FROM moved JOIN commit_mode ON true")
    mode = "on" if move.durable else "off"
    params = sql.move_cte(move).compile(dialect=PG).params
    assert "synchronous_commit" in params.values() and mode in params.values()


def test_statements_are_built_once() -> None:
    assert sql.move_update(moves.COMPLETE) is sql.move_update(moves.COMPLETE)
    assert sql.move_cte(moves.COMPLETE) is sql.move_cte(moves.COMPLETE)
    assert inserts.job_insert_cte() is inserts.job_insert_cte()


@pytest.mark.parametrize("dialect", [PG, SQLITE], ids=["postgresql", "sqlite"])
def test_every_other_statement_compiles(dialect: Any) -> None:
    for statement in (
        inserts.JOB_INSERT,
        selects.SELECT_JOB,
        selects.SELECT_BY_KEY,
        selects.SELECT_ATTEMPTS,
        selects.SELECT_EVENTS,
        selects.COUNT_BY_STATUS,
        selects.OLDEST_PENDING,
        selects.DELETE_EVENTS,
        selects.DELETE_UNPUBLISHED,
        selects.SELECT_UNPUBLISHED,
        sql.event_insert(sql.jobs, "enqueued", sql.JobStatus.PENDING),
    ):
        assert str(statement.compile(dialect=dialect))


def test_the_new_job_insert_writes_its_enqueued_event_in_one_statement() -> None:
    text = str(inserts.job_insert_cte().compile(dialect=PG))
    assert text.startswith("WITH inserted AS")
    assert "INSERT INTO background_jobs" in text
    assert "INSERT INTO background_job_events" in text
    params = inserts.job_insert_cte().compile(dialect=PG).params
    assert {"enqueued", "pending"} <= set(params.values())


def test_the_relay_moves_and_the_undo_only_touch_rows_nobody_handed_over() -> None:
    """Issue 6, item 4: a row is published by its producer, or, after the grace period, by
    exactly one relay; the producer's undo deletes it only while nobody handed it over."""
    handed = sql.move_update(moves.HANDED_OVER).compile(dialect=SQLITE)
    assert {v for k, v in handed.params.items() if k.startswith("status_")} == {
        s.value for s in sql.JobStatus
    }
    assert "background_jobs.published_at IS NULL" in where_of(str(handed))
    assert "background_jobs.revision = ?" in where_of(str(handed))
    claim = sql.move_update(moves.RELAY_CLAIM).compile(dialect=SQLITE)
    where = where_of(str(claim))
    assert {v for k, v in claim.params.items() if k.startswith("status_")} == {"pending"}
    for condition in (
        "background_jobs.published_at IS NULL",
        "background_jobs.updated_at < ?",
        "background_jobs.locked_until IS NULL OR background_jobs.locked_until < ",
    ):
        assert condition in where
    relayed = where_of(str(sql.move_update(moves.RELAYED).compile(dialect=SQLITE)))
    assert "background_jobs.locked_by = ?" in relayed
    assert "background_jobs.published_at IS NULL" in relayed
    assert moves.RELAYED.event == "relayed"
    undo = where_of(str(selects.DELETE_UNPUBLISHED.compile(dialect=SQLITE)))
    assert "published_at IS NULL" in undo and "locked_by IS NULL" in undo
    for move in (moves.HANDED_OVER, moves.RELAY_CLAIM, moves.RELAYED):
        assert str(sql.move_cte(move).compile(dialect=PG)).startswith("WITH moved AS")


@pytest.mark.parametrize(
    ("move", "column"),
    [
        (moves.CLAIM, "locked_until"),
        (moves.TAKE_OVER, "locked_until"),
        (moves.RENEW, "locked_until"),
        (moves.RETRYING, "not_before"),  # a retrying row's due time has its own column
    ],
)
def test_lease_and_backoff_times_come_from_the_database_clock(move: sql.Move, column: str) -> None:
    text = str(sql.move_update(move).compile(dialect=PG))
    assert f"{column}=(statement_timestamp() + make_interval(secs => " in text
    assert "%(until)s" not in text


def test_expiry_is_judged_on_the_database_clock_with_a_grace() -> None:
    where = where_of(str(sql.move_update(moves.TAKE_OVER).compile(dialect=PG)))
    assert "locked_until < (statement_timestamp() + make_interval(secs => -%(grace_s)s" in where
    claim = where_of(str(sql.move_update(moves.CLAIM).compile(dialect=PG)))
    # a waiting row's due time has come, or comes within the claim's margin (CLAIM_EARLY_S)
    assert "not_before <= (statement_timestamp() + make_interval(secs => %(claim_early_s)s" in claim
    assert "locked_until <= statement_timestamp()" in claim  # the relay's claim is over
