"""When a job is due and by when it must have started: the pure decisions of scheduling.

- **Due time** (``not_before``): a job enqueued with Celery's ``countdown``/``eta`` (or a
  debounce's delay) is due then. One due further ahead than the horizon
  (``tracked_schedule_horizon_seconds``) is *held*: its row is created ``pending`` without
  a message, and the scheduler pass (``services/schedule.py``) publishes it once it comes
  within the horizon, with the rest of its countdown (:func:`held`).
- **Deadline** (``deadline_at``): the task's ``deadline`` option or a call's
  ``_deadline``: a ``timedelta`` or seconds (relative to the enqueue, on the database's
  clock) or an aware ``datetime`` (absolute). A job not started by then ends ``cancelled``
  with the ``error_type`` ``DeadlineExceeded`` (:func:`past_deadline`, the claim's fence).

Pure: no Celery, Redis or SQL. Bad input raises ``TypeError``/``InvalidPayload`` (a call)
or ``InvalidTaskOption`` (a task's option) before anything is written.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from .errors import InvalidPayload, InvalidTaskOption
from .jobs import Job
from .validation import MAX_SECONDS, is_number

#: The ``error_type`` of a job cancelled at its deadline (``errors.DeadlineExceeded``).
DEADLINE_EXCEEDED = "DeadlineExceeded"


class Deadline(NamedTuple):
    """A deadline as stored: seconds after the enqueue (database clock), or a UTC time."""

    in_s: float | None = None
    at: datetime | None = None

    @property
    def given(self) -> bool:
        return self.in_s is not None or self.at is not None


NO_DEADLINE = Deadline()


def relative_seconds(value: Any, name: str) -> float:
    """A relative span (``timedelta`` or seconds) as a positive finite number of seconds.

    Raises:
        TypeError: not a ``timedelta`` or a number.
        InvalidPayload: zero, negative or not finite.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif is_number(value):
        seconds = float(value)
    else:
        raise TypeError(
            f"{name} must be a timedelta, a number of seconds or an aware datetime, "
            f"not {type(value).__name__}"
        )
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS):
        raise InvalidPayload(f"{name} must be a positive span of time, got {value!r}")
    return seconds


def deadline_of(value: Any, name: str = "_deadline") -> Deadline:
    """A call's deadline: None, an aware ``datetime`` (absolute), or a span (relative).

    Raises:
        TypeError: a value of another type.
        InvalidPayload: a naive ``datetime``, or a span that is not positive.
    """
    if value is None:
        return NO_DEADLINE
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidPayload(
                f"{name} must be an aware datetime (a naive one is ambiguous), got {value!r}"
            )
        return Deadline(at=value.astimezone(timezone.utc))
    return Deadline(in_s=relative_seconds(value, name))


def task_deadline(value: Any) -> float | None:
    """A task's ``deadline`` option: None, or a relative span in seconds.

    Raises:
        InvalidTaskOption: anything else (an absolute time makes no sense for a task).
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        raise InvalidTaskOption("deadline", "must be a timedelta or seconds, not a datetime")
    try:
        return relative_seconds(value, "deadline")
    except (TypeError, InvalidPayload) as exc:
        raise InvalidTaskOption("deadline", str(exc)) from None


def check_deadline(
    deadline: Deadline,
    due_in_s: float | None,
    due_at: datetime | None,
    now: datetime,
    name: str = "_deadline",
) -> None:
    """Refuse a deadline before the job's due time (``now``: this host's clock, the
    enqueue's; an absolute deadline must also be ahead of it). ``name``: the option as the
    caller gave it, named by the error.

    Raises:
        InvalidPayload: the deadline comes before the job could start.
    """
    if not deadline.given:
        return
    due = due_at if due_at is not None else now + timedelta(seconds=max(0.0, due_in_s or 0.0))
    ends = deadline.at if deadline.at is not None else now + timedelta(seconds=deadline.in_s or 0)
    if ends <= due:
        raise InvalidPayload(
            f"{name} ({ends.isoformat()}) is not after the job's due time ({due.isoformat()})"
        )


def held(due_in_s: float | None, due_at: datetime | None, horizon_s: float, now: datetime) -> bool:
    """Whether a job due after ``due_in_s`` seconds or at ``due_at`` is held in the
    database (due further ahead than the horizon), not handed to the broker now."""
    if due_in_s is not None:
        return due_in_s > horizon_s
    return due_at is not None and (due_at - now).total_seconds() > horizon_s


def held_row(job: Job, horizon_s: float) -> bool:
    """``job``'s row was written held: due more than ``horizon_s`` after its last write
    (no producer publishes it: the scheduler pass does, or did)."""
    due = job.not_before
    return due is not None and (due - job.updated_at).total_seconds() > horizon_s


def past_deadline(job: Job, now: datetime) -> bool:
    """The waiting ``job`` can no longer start: its deadline has come (``now``: the
    database's clock)."""
    return job.deadline_at is not None and job.deadline_at <= now


def deadline_message(job: Job) -> str:
    """The reason a job cancelled at its deadline records."""
    at = "" if job.deadline_at is None else f" ({job.deadline_at.isoformat()})"
    return f"cancelled: its deadline{at} passed before it started (DeadlineExceeded)"
