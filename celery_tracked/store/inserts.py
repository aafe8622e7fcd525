"""The statements that create job rows: a producer's insert (with its ``enqueued`` event)
and a successor's insert-unless-taken. Written once, as Core statements (see
``transitions.py`` for the moves)."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Float, Insert, Select, bindparam, func, insert
from sqlalchemy.dialects import postgresql, sqlite

from ..core import jobs as core_jobs
from ..core.jobs import NEW_JOB_COLUMNS, JobStatus
from .clock import db_time
from .models import UTCDateTime, jobs
from .statements import committed

__all__ = [
    "JOB_INSERT",
    "NEW_JOB_COLUMNS",
    "NEW_JOB_DEFAULTS",
    "job_insert_cte",
    "job_insert_if_absent",
]

#: A job enqueued with a ``countdown`` is due that long after the insert on the database's
#: clock (``due_in_s``); one with an ``eta``, at that time (``due_at``, UTC); else NULL.
DUE_AT = func.coalesce(
    bindparam("due_at", type_=UTCDateTime), db_time(bindparam("due_in_s", type_=Float))
)
#: A job's deadline: ``deadline_in_s`` after the insert on the database's clock, or at
#: ``deadline_at`` (UTC); else NULL (``core/deadlines.py``).
DEADLINE_AT = func.coalesce(
    bindparam("deadline_at", type_=UTCDateTime),
    db_time(bindparam("deadline_in_s", type_=Float)),
)
#: The values a producer's row may leave out (no countdown/eta: due at once; no deadline).
NEW_JOB_DEFAULTS = {
    **core_jobs.NEW_JOB_DEFAULTS,
    "due_in_s": None,
    "due_at": None,
    "deadline_in_s": None,
    "deadline_at": None,
}
_NEW_JOB_VALUES: dict[str, Any] = {
    **{c: bindparam(c, type_=jobs.c[c].type) for c in NEW_JOB_COLUMNS},
    "not_before": DUE_AT,
    "deadline_at": DEADLINE_AT,
}
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
