"""The statements that create job rows: a producer's insert (with its ``enqueued`` event)
and a successor's insert-unless-taken. Written once, as Core statements (see
``statements.py`` for the moves)."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Insert, Select, bindparam, insert
from sqlalchemy.dialects import postgresql, sqlite

from ..jobs import JobStatus
from ..models import jobs
from .statements import committed

#: Columns of a new job row, in the order the producer gives them.
NEW_JOB_COLUMNS = (
    "id",
    "queue_name",
    "job_type",
    "task_name",
    "celery_task_id",
    "status",
    "payload_json",
    "attempts_made",
    "max_attempts",
    "idempotency_key",
    "key_round",
    "revision",
    "retries_exhausted",
    "correlation_id",
    "parent_job_id",
    "owner_id",
    "concurrency_key",
    "progress",
    "created_at",
    "updated_at",
)
#: Values of a new job row the producer need not give.
NEW_JOB_DEFAULTS: dict[str, Any] = {
    "attempts_made": 0,
    "progress": 0,
    "key_round": 0,
    "revision": 0,
    "concurrency_key": None,
    "retries_exhausted": False,
}
_NEW_JOB_VALUES = {c: bindparam(c, type_=jobs.c[c].type) for c in NEW_JOB_COLUMNS}
JOB_INSERT = insert(jobs).values(_NEW_JOB_VALUES)


@functools.cache
def job_insert_if_absent(dialect: str) -> Insert:
    """A new job row, inserted unless its id or idempotency key is taken (a successor
    that another job already holds the key of): nothing is inserted then, no error."""
    if dialect == "postgresql":
        return postgresql.insert(jobs).values(_NEW_JOB_VALUES).on_conflict_do_nothing()
    if dialect == "sqlite":
        return sqlite.insert(jobs).values(_NEW_JOB_VALUES).on_conflict_do_nothing()
    return JOB_INSERT.prefix_with("IGNORE")  # MySQL, MariaDB


@functools.cache
def job_insert_cte() -> Select[Any]:
    """PostgreSQL: the new row and its ``enqueued`` event in one statement, committed
    durably (``synchronous_commit=on`` for its own transaction, whatever the server's
    default): a producer told its job was created finds the row after a server crash."""
    inserted = JOB_INSERT.returning(jobs.c.id, jobs.c.attempts_made, jobs.c.max_attempts)
    return committed(inserted.cte("inserted"), True, ("enqueued", JobStatus.PENDING))
