"""Pure decisions of a run, and the verdicts the runner hands to the Celery adapter.

``plan_outcome`` classifies how a body ended (:class:`BodyEnd`: a result, a control
:class:`Signal` such as Celery's ``Ignore``/``Reject``/``Retry``, ``Unrecoverable``, any
other error) into what to write and what happens next (a :class:`Plan`; a failed attempt's
write is one :class:`Failure`; ``after_write``: the verdict once written);
``retry_delay_ms`` gives a body's own retry's delay (the backoff:
:func:`celery_tracked.retry_policy.backoff_ms`). No I/O here, and no Celery:
which exceptions are control signals is read by a :class:`Signals` the adapter passes in
(``celery_signals.py``, on the ``Run``).

The verdicts are what a run amounts to for Celery. Only ``TrackedTask`` turns them into
Celery's ``Ignore``/``Retry``/``Reject``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from .errors import Unrecoverable
from .jobs import NewRow

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
    #: the job waits (``pending``/``retrying``), its message handed to the broker again
    waiting: bool = False


Verdict = Completed | Retrying | Failed | PassedOn | Skipped | Postponed


# -- control signals: what a framework's own exceptions ask of the run ----------------


class SignalKind(enum.Enum):
    """The control exceptions a body may raise (Celery's names): ``IGNORE`` (it handed
    its work over, ``replace``, or dropped it), ``REJECT`` (it refused the message; with
    ``requeue`` it comes back at once), ``RETRY`` (its own ``self.retry``: the message is
    re-published)."""

    IGNORE = "ignore"
    REJECT = "reject"
    RETRY = "retry"


@dataclass(frozen=True)
class Signal:
    """What a control exception asks of the run: ``requeue`` (a reject), ``when`` (a
    retry: a countdown in seconds, or an eta) and ``cause`` (the error a retry is for)."""

    kind: SignalKind
    requeue: bool = False
    when: float | datetime | None = None
    cause: BaseException | None = None


class Signals(Protocol):
    """Reads a framework's control exceptions (the Celery adapter's: ``celery_signals.py``)."""

    def read(self, error: BaseException) -> Signal | None:
        """The signal ``error`` is, or None for an error of the body's own."""
        ...

    def out_of_retries(self) -> BaseException:
        """The error a job's final failure raises for a retry that had no cause (Celery's
        ``MaxRetriesExceededError``)."""
        ...


class NoSignals:
    """No framework: every exception is an error of the body's own."""

    def read(self, error: BaseException) -> Signal | None:
        return None

    def out_of_retries(self) -> BaseException:
        return Unrecoverable("Can't retry: the job has no attempt left")


NO_SIGNALS: Signals = NoSignals()


def _read(signals: Signals, error: BaseException | None, kind: SignalKind) -> Signal | None:
    signal = None if error is None else signals.read(error)
    return signal if signal is not None and signal.kind is kind else None


# -- the classification of a body's end -----------------------------------------------


#: How a failure's note begins when its error was not retried (``plan_outcome``): the
#: reason follows, after the error in the ``failed`` event (``AttemptError.line``).
NOT_RETRIED = "not retried: "


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


@dataclass(frozen=True)
class BodyEnd:
    """How a body ended: its ``error`` (None: it returned ``result``, stored as
    ``result_json``); ``started``: its ``time.monotonic()`` start, for the duration."""

    error: Exception | None
    started: float
    result: Any = None
    result_json: str | None = None


@dataclass(frozen=True)
class Failure:
    """A failed attempt's write, one value: what failed (``error_type``, ``summary``: its
    masked text), what comes next (``retry_ms``: the next attempt's delay, the job
    ``retrying``; None: the job ``failed``) and ``verdict``, the run's once it is written.

    ``retries_exhausted``: the failure used up the job's retries (a pipeline's fail-soft
    successor follows it); ``rows``: inserted with a final failure (the hooks'
    ``failure_rows``); ``carry``: a retry whose write the database refused travels in the
    re-published message for the next delivery to write first (a final failure always
    does; a retry without ``carry`` does not: the re-publish makes the next attempt anyway);
    ``note``: the plan's note, recorded after the error (why it was not retried).
    """

    error_type: str
    summary: str
    verdict: Verdict
    retry_ms: int | None = None
    retries_exhausted: bool = False
    rows: Sequence[NewRow] = ()
    carry: bool = False
    note: str | None = None

    @property
    def final(self) -> bool:
        """The job fails: no attempt follows."""
        return self.retry_ms is None

    @property
    def carried(self) -> bool:
        """Unsaved, it must travel with the message (never lost, nor the body run again
        before it is written)."""
        return self.final or self.carry


def plan_outcome(
    error: BaseException | None,
    attempt: int,
    max_attempts: int,
    backoff: Callable[[int], int],
    retryable: Callable[[BaseException], bool] | None = None,
    gave_up: bool = False,
    retry_sent: datetime | None = None,
    signals: Signals = NO_SIGNALS,
    refusal: Callable[[BaseException], str] | None = None,
) -> Plan:
    """Classify how attempt ``attempt`` of ``max_attempts`` ended (``error`` None: it
    returned). ``backoff(attempt)`` gives the delay after a failed attempt, in ms;
    ``retryable(error)`` false: the error fails the job at once (``retry_policy.py``);
    ``gave_up``: ``error`` is what the body's own ``self.retry`` raised because no retry
    remained (Celery's ``max_retries``): the job fails with it, its retries used up;
    ``retry_sent``: when the body's own retry published its message; ``signals``: which
    errors are control signals; ``refusal(error)``: why ``retryable`` refused it (the
    plan's note, ``NOT_RETRIED`` and the reason, recorded with the failure)."""
    last = attempt >= max_attempts
    if error is None:
        return Plan(Write.COMPLETE)
    if gave_up:
        return Plan(Write.FAIL, reraise=True, note="no retry left", used_up=True)
    signal = signals.read(error)
    kind = None if signal is None else signal.kind
    if kind is SignalKind.IGNORE:  # the body handed its work over (``replace``) or dropped it
        return Plan(Write.COMPLETE, reraise=True, note="ignored or replaced")
    if signal is not None and kind is SignalKind.REJECT:
        # requeued: the message comes back at once and takes the released lease over
        write = Write.RELEASE if signal.requeue else Write.FAIL
        return Plan(write, reraise=True)
    if signal is not None and kind is SignalKind.RETRY:
        # the body asked for a retry itself (``self.retry``): the message is already
        # re-published. ``TrackedTask.retry`` never re-publishes from the last attempt (it
        # raises like Celery); a ``Retry`` raised there anyway fails the job, and the
        # re-published delivery finds it failed
        if last:
            return Plan(Write.FAIL, reraise=True)
        return Plan(Write.RETRY, delay_ms=retry_delay_ms(signal, sent=retry_sent), reraise=True)
    if last:
        return Plan(Write.FAIL, reraise=True)
    if isinstance(error, Unrecoverable):
        return Plan(Write.FAIL, reraise=True, note=f"{NOT_RETRIED}Unrecoverable ends its job")
    if retryable is not None and not retryable(error):
        why = "its task does not retry it" if refusal is None else refusal(error)
        return Plan(Write.FAIL, reraise=True, note=f"{NOT_RETRIED}{why}")
    return Plan(Write.RETRY, delay_ms=backoff(attempt))


def exhausted(
    error: BaseException,
    attempt: int,
    max_attempts: int,
    retryable: Callable[[BaseException], bool] | None = None,
    signals: Signals = NO_SIGNALS,
) -> bool:
    """A failure that used up the job's retries: its last attempt raised an error its task
    retries (never ``Unrecoverable``, never one the task does not retry). A pipeline's
    fail-soft successor follows only such a failure."""
    cause = retry_cause(error, signals)
    if isinstance(cause, Unrecoverable) or attempt < max_attempts:
        return False
    return retryable is None or retryable(cause)


def retry_cause(error: BaseException, signals: Signals = NO_SIGNALS) -> BaseException:
    """The exception a failure record is about: a ``Retry``'s cause when it has one."""
    retry = _read(signals, error, SignalKind.RETRY)
    if retry is not None and retry.cause is not None:
        return retry.cause
    return error


def final_error(error: BaseException, signals: Signals = NO_SIGNALS) -> BaseException:
    """What a job's final failure raises to Celery. A ``Retry`` is no failure to Celery
    (its state would stay ``RETRY``, a chord would wait): its cause instead, else
    ``MaxRetriesExceededError`` (``signals.out_of_retries()``), as Celery's own ``retry``
    raises once none remain."""
    retry = _read(signals, error, SignalKind.RETRY)
    if retry is None:
        return error
    if retry.cause is not None:
        return retry.cause
    return signals.out_of_retries()


def retry_delay_ms(retry: Signal, now: datetime | None = None, sent: datetime | None = None) -> int:
    """The delay, from ``now``, that a body's own ``self.retry(countdown=...|eta=...)``
    asked for: until its message is due, as Celery waits it. ``sent``: when its message
    was published (a countdown counts from then, as Celery's eta does). The delivery finds
    the row due although it was written a moment after the message (``CLAIM_EARLY_S``)."""
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
    return max(0, int((when - now).total_seconds() * 1000))


def after_write(
    plan: Plan, error: Exception | None, signals: Signals, result: Any = None
) -> Verdict:
    """The verdict once the plan's write is done (``signals``: which errors are control
    signals, for the error a final failure raises)."""
    if error is None:
        return Completed(result)
    if not plan.reraise:
        return Retrying((plan.delay_ms or 0) / 1000, error)
    if plan.write is Write.FAIL:
        return Failed(final_error(error, signals))
    return PassedOn(error)


def postpone_for(remaining_s: float, lease_s: float) -> float:
    """How long a duplicate delivery waits for a live lease to end (or lapse)."""
    return min(max(remaining_s + 0.1, 0.2), lease_s)
