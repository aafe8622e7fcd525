"""Pure decisions of a run, and the verdicts the runner hands to the Celery adapter.

``plan_outcome`` classifies how a body ended (a result, Celery's ``Ignore``/``Reject``/
``Retry``, ``Unrecoverable``, any other error) into what to write and what happens next;
``retry_delay_ms`` gives a body's own retry's delay (the backoff:
:func:`celery_tracked.retry_policy.backoff_ms`). No I/O here.

The verdicts are what a run amounts to for Celery. Only ``TrackedTask`` turns them into
Celery's ``Ignore``/``Retry``/``Reject``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from celery.exceptions import Ignore, MaxRetriesExceededError, Reject, Retry

from .errors import Unrecoverable

# -- verdicts -------------------------------------------------------------------------


@dataclass(frozen=True)
class Completed:
    """The body's result, durably recorded: acknowledge with it."""

    result: Any


@dataclass(frozen=True)
class Retrying:
    """The attempt failed and another comes: re-publish after ``countdown`` seconds.
    ``cause`` is None when the body succeeded but its completion could not be saved."""

    countdown: float
    cause: Exception | None


@dataclass(frozen=True)
class Failed:
    """No attempt remains (or ``Unrecoverable``, or the body's ``Reject``): raise ``error``
    (masked) to Celery."""

    error: BaseException


@dataclass(frozen=True)
class PassedOn:
    """The body raised Celery's own ``Ignore``, ``Reject(requeue=True)`` or ``Retry``
    (attempts remaining): recorded, raised as is."""

    signal: BaseException


@dataclass(frozen=True)
class Skipped:
    """This delivery runs nothing (the job ended, is gone, or the outcome was written
    elsewhere): acknowledge without a result."""

    reason: str


@dataclass(frozen=True)
class Postponed:
    """Deliver again after ``countdown`` seconds without using an attempt (another run holds
    the lease, the database is unreachable, a hook asked to wait). ``headers`` replace the
    message's tracked headers when given."""

    countdown: float
    reason: str
    headers: Mapping[str, Any] | None = None


Verdict = Completed | Retrying | Failed | PassedOn | Skipped | Postponed


# -- the classification of a body's end -----------------------------------------------


class Write(enum.Enum):
    """The fenced write that records an attempt's end."""

    COMPLETE = "completed"
    RETRY = "retrying"
    FAIL = "failed"
    RELEASE = "released"


@dataclass(frozen=True)
class Plan:
    """What to write after a body ended, and what to tell Celery.

    ``delay_ms``: before the next attempt (``Write.RETRY`` only). ``reraise``: the body's
    exception goes to Celery as is (after the write); otherwise the runner re-publishes
    (a retry) or returns the result.
    """

    write: Write
    delay_ms: int | None = None
    reraise: bool = False
    note: str | None = None
    #: the failure used up the job's retries whatever its error (``Write.FAIL`` only)
    used_up: bool = False


def plan_outcome(
    error: BaseException | None,
    attempt: int,
    max_attempts: int,
    backoff: Callable[[int], int],
    retryable: Callable[[BaseException], bool] | None = None,
    gave_up: bool = False,
    retry_sent: datetime | None = None,
) -> Plan:
    """Classify how attempt ``attempt`` of ``max_attempts`` ended (``error`` None: it
    returned). ``backoff(attempt)`` gives the delay after a failed attempt, in ms;
    ``retryable(error)`` false: the error fails the job at once (``retry_policy.py``);
    ``gave_up``: ``error`` is what the body's own ``self.retry`` raised because no retry
    remained (Celery's ``max_retries``): the job fails with it, its retries used up;
    ``retry_sent``: when the body's own retry published its message."""
    last = attempt >= max_attempts
    if error is None:
        return Plan(Write.COMPLETE)
    if gave_up:
        return Plan(Write.FAIL, reraise=True, note="no retry left", used_up=True)
    if isinstance(error, Ignore):  # the body handed its work over (``replace``) or dropped it
        return Plan(Write.COMPLETE, reraise=True, note="ignored or replaced")
    if isinstance(error, Reject):
        # requeued: the message comes back at once and takes the released lease over
        write = Write.RELEASE if getattr(error, "requeue", False) else Write.FAIL
        return Plan(write, reraise=True)
    if isinstance(error, Retry):
        # the body asked for a retry itself (``self.retry``): the message is already
        # re-published. ``TrackedTask.retry`` never re-publishes from the last attempt (it
        # raises like Celery); a ``Retry`` raised there anyway fails the job, and the
        # re-published delivery finds it failed
        if last:
            return Plan(Write.FAIL, reraise=True)
        return Plan(Write.RETRY, delay_ms=retry_delay_ms(error, sent=retry_sent), reraise=True)
    if isinstance(error, Unrecoverable) or last:
        return Plan(Write.FAIL, reraise=True)
    if retryable is not None and not retryable(error):
        return Plan(Write.FAIL, reraise=True, note="not retried for this exception")
    return Plan(Write.RETRY, delay_ms=backoff(attempt))


def exhausted(
    error: BaseException,
    attempt: int,
    max_attempts: int,
    retryable: Callable[[BaseException], bool] | None = None,
) -> bool:
    """A failure that used up the job's retries: its last attempt raised an error its task
    retries (never ``Unrecoverable``, never one the task does not retry). A pipeline's
    fail-soft successor follows only such a failure."""
    cause = retry_cause(error)
    if isinstance(cause, Unrecoverable) or attempt < max_attempts:
        return False
    return retryable is None or retryable(cause)


def retry_cause(error: BaseException) -> BaseException:
    """The exception a failure record is about: a ``Retry``'s cause when it has one."""
    if isinstance(error, Retry) and isinstance(error.exc, BaseException):
        return error.exc
    return error


def final_error(error: BaseException) -> BaseException:
    """What a job's final failure raises to Celery. A ``Retry`` is no failure to Celery
    (its state would stay ``RETRY``, a chord would wait): its cause instead, else
    ``MaxRetriesExceededError``, as Celery's own ``retry`` raises once none remain."""
    if not isinstance(error, Retry):
        return error
    cause = retry_cause(error)
    if cause is not error:
        return cause
    return MaxRetriesExceededError("Can't retry: the job has no attempt left")


#: A body's own retry publishes its message before the attempt's ``retrying`` is written:
#: the job's backoff ends up to this long before the message is due (at most half its
#: countdown), so that the delivery finds it due rather than waiting once more.
EARLY_MS = 250


def retry_delay_ms(retry: Retry, now: datetime | None = None, sent: datetime | None = None) -> int:
    """The delay, from ``now``, that a body's own ``self.retry(countdown=...|eta=...)``
    asked for. ``sent``: when its message was published (a countdown counts from then, and
    the delay ends a little early: ``EARLY_MS``)."""
    when = retry.when
    if isinstance(when, int | float):
        if sent is None:
            return int(when * 1000)
        when = sent + timedelta(seconds=when)
    if not isinstance(when, datetime):
        return 0
    if when.tzinfo is None:  # Celery reads a naive eta as UTC
        when = when.replace(tzinfo=timezone.utc)
    now = now or datetime.now(timezone.utc)
    delay = int((when - now).total_seconds() * 1000)
    if sent is not None:
        delay -= min(EARLY_MS, max(0, int((when - sent).total_seconds() * 1000)) // 2)
    return max(0, delay)


def postpone_for(remaining_s: float, lease_s: float) -> float:
    """How long a duplicate delivery waits for a live lease to end (or lapse)."""
    return min(max(remaining_s + 0.1, 0.2), lease_s)
