"""Runs in this process: ``task_always_eager`` and ``apply()``, tracked like any other.

The job's row is created first, by the same producer path as an enqueue (guard, row,
``enqueued`` event) but with no broker publish: the message is "handed over" to this
process (its "publish" runs Celery's ``apply_async`` up to the delivery, which is held:
what Celery refuses before it undoes the enqueue). Then Celery's own ``apply`` runs the
delivery, with the tracked headers, through
the same ``Runner`` as a worker would: the row moves through its lifecycle (``completed``,
``failed``, ``retrying`` → …) and the caller gets Celery's ``EagerResult``. The body's
own exception propagates when ``task_eager_propagates`` asks for it; nothing is undone
(the row stays, with its outcome).

Retries run inline, at once (Celery's eager retries do not wait either; the row records
a delay of 0), also with ``task_eager_propagates`` (where Celery would raise ``Retry``).

An enqueue that publishes (not eager) does not come here: ``TrackedTask._enqueue`` hands
it to the ``Producer`` (``services/producer.py``) directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from functools import partial
from typing import TYPE_CHECKING, Any

from celery import states
from celery.exceptions import Retry
from celery.result import AsyncResult, EagerResult

from ..core.description import TaskDescription
from ..core.errors import JobFailed
from ..core.jobs import EnqueueResult, Job, JobStatus
from ..services.producer import CallFacts
from .calls import Send

if TYPE_CHECKING:
    from .celery_tracker import Tracker

#: The deliveries an eager enqueue's publish holds, to run after its row is handed over.
_HELD: ContextVar[list[Callable[[], Any]] | None] = ContextVar("tracked_held", default=None)


def enqueue(
    tracker: Tracker,
    task: TaskDescription,
    facts: CallFacts,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    send: Send,
) -> tuple[EnqueueResult[Any], AsyncResult[Any] | None]:
    """Create the call's job through the producer (due now: Celery's eager mode ignores a
    ``countdown``/``eta``), its "publish" ``send`` held, then run it here.

    Returns the enqueue's result and the ``EagerResult`` of the run (for a duplicate: one
    built from the existing job's row).

    Raises:
        EnqueueError: as ``Enqueuer.enqueue`` (nothing was created).
        Exception: Celery's own refusal of the call (a ``ValueError`` of a bad time
            limit...; nothing was created), or the body's own, with
            ``task_eager_propagates`` (the row keeps it).
    """
    held: list[Callable[[], Any]] = []
    holding = _HELD.set(held)
    try:  # the "publish": Celery's own checks, the delivery held (``deliver``)
        queued = tracker.celery_side.producer.enqueue(task, facts, args, kwargs, send, due_now=True)
    finally:
        _HELD.reset(holding)
    if not queued.created:
        return queued, row_result(tracker.get_job(queued.job_id), queued.job_id)
    result = held[-1]() if held else send.sent  # a new job's, or a new round's (re-sent id)
    found = tracker.get_job(queued.job_id)
    status = found.status if found is not None else queued.status
    return EnqueueResult(queued.job_id, status, True), result


def deliver(apply: Callable[..., EagerResult[Any]], *args: Any, **options: Any) -> Any:
    """A tracked delivery run here (``run_inline``). Inside an eager enqueue's publish it
    is only held, and runs once the row is handed over: whatever Celery refuses before it
    (a bad time limit...) undoes the enqueue, as for a publish to a broker."""
    held = _HELD.get()
    if held is None:
        return run_inline(apply, *args, **options)
    held.append(partial(run_inline, apply, *args, **options))
    return None


def run_inline(apply: Callable[..., EagerResult[Any]], *args: Any, **options: Any) -> Any:
    """Celery's ``apply`` of a tracked delivery, its retries run inline even when
    ``task_eager_propagates`` raised Celery's ``Retry`` out of it."""
    try:
        return apply(*args, **options)
    except Retry as retry:
        again = getattr(retry, "sig", None)  # the retried delivery, as Celery made it
        if again is None:
            raise
        return again.apply(retries=int(options.get("retries") or 0) + 1)


def row_result(job: Job | None, job_id: str) -> EagerResult[Any]:
    """An ``EagerResult`` telling what the row says (a duplicate that was not run)."""
    if job is None:
        return EagerResult(job_id, None, states.PENDING)
    if job.status is JobStatus.COMPLETED:
        return EagerResult(job_id, job.result, states.SUCCESS)
    if job.status in (JobStatus.FAILED, JobStatus.CANCELLED):
        return EagerResult(job_id, JobFailed(job), states.FAILURE)
    return EagerResult(job_id, None, states.PENDING)
