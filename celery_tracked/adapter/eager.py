"""Runs in this process: ``task_always_eager`` and ``apply()``, tracked like any other.

The job's row is created first, by the same producer path as an enqueue (guard, row,
``enqueued`` event) but with no broker publish: the message is "handed over" to this
process. Then Celery's own ``apply`` runs the delivery, with the tracked headers, through
the same ``Runner`` as a worker would: the row moves through its lifecycle (``completed``,
``failed``, ``retrying`` → …) and the caller gets Celery's ``EagerResult``. The body's
own exception propagates when ``task_eager_propagates`` asks for it; nothing is undone
(the row stays, with its outcome).

Retries run inline, at once (Celery's eager retries do not wait either; the row records
a delay of 0), also with ``task_eager_propagates`` (where Celery would raise ``Retry``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from celery import states
from celery.exceptions import Retry
from celery.result import AsyncResult, EagerResult

from ..core.calls import PreparedCall
from ..core.errors import JobFailed
from ..core.jobs import EnqueueResult, Job, JobStatus
from ..core.messages import TrackedHeaders
from ..services.enqueuer import Enqueuer, NewJob

#: ``publish(headers, task_id)``: hands the message to the broker, or runs it here (eager).
Send = Callable[[TrackedHeaders, str], AsyncResult[Any]]


def enqueue(
    enqueuer: Enqueuer, job: NewJob, send: Send, redact_keys: tuple[str, ...], inline: bool
) -> tuple[EnqueueResult[Any], AsyncResult[Any] | None]:
    """Create ``job`` and publish it (``inline`` False), or create it and run it here.

    Returns the enqueue's result and, for a run here, Celery's ``EagerResult`` (for a
    duplicate: one built from the existing job's row).

    Raises:
        EnqueueError: as ``Enqueuer.enqueue`` (nothing was created).
        Exception: the body's own, with ``task_eager_propagates`` (the row keeps it).
    """
    if not inline:
        return enqueuer.enqueue(job, send, redact_keys), None
    handed: list[tuple[TrackedHeaders, str]] = []  # no broker publish: it runs here after
    queued = enqueuer.enqueue(job, lambda *message: handed.append(message), redact_keys)
    if not queued.created:
        return queued, row_result(enqueuer.store.get(queued.job_id), queued.job_id)
    result = send(*handed[-1])  # a new job's message, or a new round's (re-sent job id)
    found = enqueuer.store.get(queued.job_id)
    status = found.status if found is not None else queued.status
    return EnqueueResult(queued.job_id, status, True), result


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


def sender(
    send: Callable[..., AsyncResult[Any]],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    call: PreparedCall,
    options: dict[str, Any],
) -> Send:
    """The job's delivery through ``send`` (Celery's ``apply_async``, or its ``apply``):
    the given ``task_id`` (the job id; the replacer's for a ``self.replace`` replacement),
    the tracked headers, the redacted ``argsrepr``/``kwargsrepr``."""

    def publish(tracked: TrackedHeaders, task_id: str) -> AsyncResult[Any]:
        headers = {**(options.pop("headers", None) or {}), **tracked.to_headers()}
        return send(
            tuple(args),
            dict(kwargs),
            task_id=task_id,
            headers=headers,
            argsrepr=call.argsrepr,
            kwargsrepr=call.kwargsrepr,
            **options,
        )

    return publish
