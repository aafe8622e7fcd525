"""Hooks: documented no-ops that features are built on (like dramatiq's middleware and
Celery's own ``before_start``...``after_return``).

- :meth:`Hooks.before_claim` may postpone a delivery without using an attempt (the global
  rate limiter, ``limiter.py``, uses it): a number of seconds, or a :class:`Wait` with
  headers for the message's next delivery.
- :meth:`Hooks.after_claim` hears that a delivery claimed its job, before the body.
- :meth:`Hooks.before_body` may still postpone a delivery that claimed its job, immediately
  before its body: the claim is then given back (no attempt used). The rate limiter grants
  the start here, so that nothing slow comes between the grant and the body.
- :meth:`Hooks.running` wraps the body of the attempt it is given (dramatiq's
  before/after process message): a hook may :meth:`~celery_tracked.attempt.Attempt.attach`
  what the body's calls reach (the progress reporter, the pipeline step), and its block
  ends when the body does, before the outcome is written.
- :meth:`Hooks.completion_rows` returns rows to insert inside the completion transaction
  of the attempt it is given: they exist if and only if the job is marked completed
  (pipelines use it). It returns data and never sees a connection.
- :meth:`Hooks.failure_rows` does the same for the write that fails a job after it
  exhausted its retries (a pipeline's fail-soft successor).
- :meth:`Hooks.after_attempt` hears that an attempt's outcome was written (or could not
  be): ``attempt.recorded`` says which write committed (pipelines publish then).
- :meth:`Hooks.after_transition` hears every transition once it is written (or failed to
  be): the structured log lines and the terminal notification are the first two built-ins.

Every hook receives what it acts on (the delivery, the claim, the attempt, the
transition) as arguments: no context variable carries the running attempt to them.

Register your own with ``Tracker.for_app(app).add_hook(MyHooks())``. A hook that raises in
``before_claim``, ``after_claim``, ``before_body``, ``running`` (entering or leaving it;
the body's own exception is never replaced), ``after_attempt`` or ``after_transition`` is
logged and ignored (the delivery goes on; the row is already the truth). One that raises in
``completion_rows``, or whose rows the database refuses, fails the attempt like a body that
raised: it is retried up to ``max_attempts``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from .attempt import Attempt
from .errors import GuardError, TrackedError
from .guard import Notifier
from .jobs import Claim, Event, NewRow
from .limits import DeliveryLimits
from .printable import visible

logger = logging.getLogger("celery_tracked")

#: The events after which a waiter is notified.
_TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True)
class Transition:
    """Something that happened to a job (a status change, or a delivery's fate).

    ``event`` names it, an :class:`~celery_tracked.jobs.Event` (a ``str``: ``enqueued``,
    ``deduplicated``, ``processing``, ``completed``, ``retrying``, ``failed``,
    ``cancelled``, ``skipped``, ``busy``, ``lease_lost``, ``error``...); ``status`` is the
    job's status after it, or the delivery's fate for the last four. ``message`` is a
    human line, already masked. Built by :meth:`of`.
    """

    job_id: str
    event: str
    status: str
    message: str
    queue: str | None = None
    job_type: str | None = None
    attempt: int | None = None
    duration_ms: int | None = None
    level: int = logging.INFO
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        event: Event,
        job_id: str,
        message: str,
        status: str | None = None,
        queue: str | None = None,
        job_type: str | None = None,
        attempt: int | None = None,
        duration_ms: int | None = None,
        level: int = logging.INFO,
        details: dict[str, Any] | None = None,
    ) -> Transition:
        """The one way the package builds a transition: ``event`` from :class:`Event`,
        ``status`` the job's status after it (a ``JobStatus``; None: the event's own
        string, as for ``completed`` or a delivery's fate such as ``busy``)."""
        return cls(
            job_id,
            event,
            event.value if status is None else str(status),
            message,
            queue,
            job_type,
            attempt,
            duration_ms,
            level,
            {} if details is None else details,
        )


@dataclass(frozen=True)
class Delivery:
    """A delivery about to claim its job."""

    job_id: str
    job_type: str
    queue: str | None
    task_name: str
    #: the task's rate and concurrency limits for this delivery (``limits.py``)
    limits: DeliveryLimits | None = None
    #: run in the caller's process (eager mode, ``apply()``): a postponed delivery would
    #: run again at once, so a hook that must wait had better wait in-process
    inline: bool = False


@dataclass(frozen=True)
class Wait:
    """What ``before_claim`` may return instead of a number: postpone ``seconds``, with a
    reason for the log and ``headers`` added to the message delivered next."""

    seconds: float
    reason: str = "a hook asked to wait"
    headers: Mapping[str, Any] | None = None
    #: hold the waiting job in the database instead (``ClaimStore.hold``: no message, no
    #: attempt used; the relay publishes it once nothing holds it: a pause, ``pauses.py``);
    #: ``seconds`` then only applies when the row cannot be held
    hold: bool = False
    #: the open circuit that holds it (``circuits.py``), not a pause
    circuit: str = ""


class Hooks:
    """Override what you need; every method does nothing by default."""

    def before_claim(self, delivery: Delivery) -> float | Wait | None:
        """Return a number of seconds (or a :class:`Wait`) to postpone this delivery (no
        attempt is used), or None to go on and claim."""
        return None

    def after_claim(self, delivery: Delivery, claim: Claim) -> None:
        """Called when ``delivery`` claimed its job, before ``before_body`` and the body."""

    def after_skip(self, delivery: Delivery) -> None:
        """Called when ``delivery`` runs nothing after ``before_claim`` let it go on (a newer
        message replaced it, its job ended or is gone): give back what it reserved."""

    def before_body(self, delivery: Delivery, claim: Claim) -> float | Wait | None:
        """Called last, immediately before the body: a number of seconds (or a
        :class:`Wait`) gives the claim back (no attempt used) and postpones the delivery;
        None lets the body start. Keep it quick: the body starts right after."""
        return None

    def running(self, attempt: Attempt) -> AbstractContextManager[object]:
        """A context manager wrapping ``attempt``'s body: entered just before it, left
        when it returned or raised (before its outcome is written). Attach what the body's
        calls need to ``attempt`` here."""
        return nullcontext()

    def completion_rows(self, attempt: Attempt, result: Any) -> Sequence[NewRow]:
        """Rows to insert in the completion transaction of ``attempt`` (whose body
        returned ``result``; ``attempt.claim`` fences the write)."""
        return ()

    def failure_rows(self, attempt: Attempt, error: BaseException) -> Sequence[NewRow]:
        """Rows to insert in the transaction that marks ``attempt``'s job ``failed`` after
        it exhausted its retries (never after ``Unrecoverable`` or an error its task does
        not retry): a pipeline's fail-soft successor."""
        return ()

    def after_attempt(self, attempt: Attempt) -> None:
        """Called once ``attempt``'s outcome was written, or could not be: its
        ``recorded`` status is the write that committed (None: none did)."""

    def after_transition(self, transition: Transition) -> None:
        """Called after each transition (from the process where it happened)."""


class LogTransitions(Hooks):
    """One structured log record per transition (``extra``: queue, job_type, job_id,
    status, attempt, duration_ms)."""

    def after_transition(self, transition: Transition) -> None:
        logger.log(
            transition.level,
            visible(transition.message),  # job data: never a raw control character
            extra={
                "queue": transition.queue and visible(transition.queue),
                "job_type": transition.job_type and visible(transition.job_type),
                "job_id": transition.job_id,
                "status": transition.status,
                "attempt": transition.attempt,
                "duration_ms": transition.duration_ms,
            },
        )


class NotifyTerminal(Hooks):
    """Wake ``Tracker.wait`` callers when a job ends."""

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier

    def after_transition(self, transition: Transition) -> None:
        if transition.event not in _TERMINAL:
            return
        try:
            self.notifier.publish(transition.job_id, transition.event)
        except TrackedError as exc:  # the row is the truth; waiters re-read it anyway
            # Redis down: the guard said so once for the process (``guard.Health``)
            level = logging.DEBUG if isinstance(exc, GuardError) else logging.WARNING
            logger.log(level, "job %s: notification not sent: %s", transition.job_id, exc)


class HookChain(Hooks):
    """Hooks run in registration order; the first postponement wins."""

    def __init__(self, hooks: Sequence[Hooks] = ()) -> None:
        self.hooks: list[Hooks] = list(hooks)

    def add(self, hook: Hooks) -> None:
        self.hooks.append(hook)

    def before_claim(self, delivery: Delivery) -> float | Wait | None:
        for hook in self.hooks:
            try:
                delay = hook.before_claim(delivery)
            except Exception:  # fail open: a broken hook must not strand the job
                logger.exception("celery-tracked hook %r failed in before_claim", hook)
                continue
            if delay is not None:
                return delay
        return None

    def after_claim(self, delivery: Delivery, claim: Claim) -> None:
        self._each("after_claim", lambda hook: hook.after_claim(delivery, claim))

    def after_skip(self, delivery: Delivery) -> None:
        self._each("after_skip", lambda hook: hook.after_skip(delivery))

    def before_body(self, delivery: Delivery, claim: Claim) -> float | Wait | None:
        for hook in self.hooks:
            try:
                delay = hook.before_body(delivery, claim)
            except Exception:  # fail open, like before_claim
                logger.exception("celery-tracked hook %r failed in before_body", hook)
                continue
            if delay is not None:
                return delay
        return None

    @contextmanager
    def running(self, attempt: Attempt) -> Iterator[None]:
        """Every hook's ``running`` block, nested in registration order."""
        with ExitStack() as stack:
            for hook in self.hooks:
                try:
                    stack.enter_context(_Guarded(hook, hook.running(attempt)))
                except Exception:  # fail open: the body runs without this hook's block
                    logger.exception("celery-tracked hook %r failed in running", hook)
            yield

    def completion_rows(self, attempt: Attempt, result: Any) -> Sequence[NewRow]:
        return [row for hook in self.hooks for row in hook.completion_rows(attempt, result)]

    def failure_rows(self, attempt: Attempt, error: BaseException) -> Sequence[NewRow]:
        return [row for hook in self.hooks for row in hook.failure_rows(attempt, error)]

    def after_attempt(self, attempt: Attempt) -> None:
        self._each("after_attempt", lambda hook: hook.after_attempt(attempt))

    def after_transition(self, transition: Transition) -> None:
        self._each("after_transition", lambda hook: hook.after_transition(transition))

    def _each(self, method: str, call: Callable[[Hooks], None]) -> None:
        """``call`` every hook in order; one that raises is logged and the next still hears."""
        for hook in self.hooks:
            try:
                call(hook)
            except Exception:
                logger.exception("celery-tracked hook %r failed in %s", hook, method)


class _Guarded:
    """A hook's ``running`` block whose own errors (entering or leaving it) are logged and
    ignored; the body's exception goes on through it unchanged, and no hook swallows it."""

    def __init__(self, hook: Hooks, block: AbstractContextManager[object]) -> None:
        self.hook = hook
        self.block = block

    def __enter__(self) -> None:
        self.block.__enter__()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> Literal[False]:
        try:
            self.block.__exit__(kind, error, traceback)
        except Exception as raised:
            if raised is not error:
                logger.exception("celery-tracked hook %r failed leaving running", self.hook)
        return False
