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

Every tracked enqueue, eager or not, delivers through a :class:`Sender`: the message's
tracked headers and ``argsrepr``/``kwargsrepr``, Celery's ``AsyncResult`` kept for the
caller, Celery's own refusals told from a broker failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from functools import partial
from typing import Any

from celery import Celery, Task, states
from celery.exceptions import Retry
from celery.result import AsyncResult, EagerResult

from ..core.calls import PreparedCall
from ..core.errors import JobFailed, PublishRefused
from ..core.jobs import EnqueueResult, Job, JobStatus
from ..core.messages import TrackedHeaders
from ..core.redact import mask_secrets
from ..services.enqueuer import Enqueuer
from ..services.producer import NewJob
from .broker import broker_failure

#: The deliveries an eager enqueue's publish holds, to run after its row is handed over.
_HELD: ContextVar[list[Callable[[], Any]] | None] = ContextVar("tracked_held", default=None)


def enqueue(
    enqueuer: Enqueuer, job: NewJob, send: Sender, redact_keys: tuple[str, ...], inline: bool
) -> tuple[EnqueueResult[Any], AsyncResult[Any] | None]:
    """Create ``job`` and publish it (``inline`` False), or create it and run it here.

    Returns the enqueue's result and Celery's result of the delivery made: the
    ``AsyncResult`` of the publish (None when nothing was published: a duplicate), or
    for a run here the ``EagerResult`` (for a duplicate: one built from the existing
    job's row).

    Raises:
        EnqueueError: as ``Enqueuer.enqueue`` (nothing was created).
        Exception: Celery's own refusal of the call (a ``ValueError`` of a bad time
            limit...; nothing was created), or the body's own, with
            ``task_eager_propagates`` (the row keeps it).
    """
    if not inline:
        return enqueuer.enqueue(job, send, redact_keys), send.sent
    held: list[Callable[[], Any]] = []
    holding = _HELD.set(held)
    try:  # the "publish": Celery's own checks, the delivery held (``deliver``)
        queued = enqueuer.enqueue(job, send, redact_keys)
    finally:
        _HELD.reset(holding)
    if not queued.created:
        return queued, row_result(enqueuer.store.get(queued.job_id), queued.job_id)
    result = held[-1]() if held else send.sent  # a new job's, or a new round's (re-sent id)
    found = enqueuer.store.get(queued.job_id)
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


class Sender:
    """The job's delivery through ``send`` (Celery's ``apply_async``, or its ``apply``):
    the given ``task_id`` (the job id; the replacer's for a ``self.replace`` replacement),
    the tracked headers, the ``argsrepr``/``kwargsrepr``: ours (redacted), or the caller's
    own (Celery's call options), a redacted argument's value masked in it. ``sent`` is
    the ``AsyncResult`` Celery made for the last delivery (None before one). Given
    ``broker_failure``, an error it does not call one (Celery refused the call itself) is
    raised as ``PublishRefused``: the enqueue is undone and that error raised as it is."""

    def __init__(
        self,
        send: Callable[..., AsyncResult[Any]],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        call: PreparedCall,
        options: Mapping[str, Any],
        redact_keys: tuple[str, ...] = (),
        broker_failure: Callable[[Exception], bool] | None = None,
    ) -> None:
        self.send, self.args, self.kwargs, self.call = send, tuple(args), dict(kwargs), call
        self.options = dict(options)
        self.redact_keys = redact_keys
        self.broker_failure = broker_failure
        self.sent: AsyncResult[Any] | None = None

    def __call__(self, tracked: TrackedHeaders, task_id: str) -> AsyncResult[Any]:
        options = dict(self.options)
        headers = {**(options.pop("headers", None) or {}), **tracked.to_headers()}
        argsrepr = self._shown(options.pop("argsrepr", None), self.call.argsrepr)
        kwargsrepr = self._shown(options.pop("kwargsrepr", None), self.call.kwargsrepr)
        self.sent = None
        try:
            self.sent = self.send(
                self.args,
                dict(self.kwargs),
                task_id=task_id,
                headers=headers,
                argsrepr=argsrepr,
                kwargsrepr=kwargsrepr,
                **options,
            )
        except Exception as exc:
            if self.broker_failure is None or self.broker_failure(exc):
                raise
            raise PublishRefused(exc) from exc
        return self.sent

    def _shown(self, given: object, ours: str) -> str:
        """The caller's text (masked), else ours."""
        if given is None:
            return ours
        return mask_secrets(str(given), self.call.secrets, self.redact_keys)


def sender(
    send: Callable[..., AsyncResult[Any]],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    call: PreparedCall,
    options: dict[str, Any],
    redact_keys: tuple[str, ...] = (),
    app: Celery | None = None,
) -> Sender:
    """The job's delivery through ``send`` (:class:`Sender`); given the ``app`` whose
    broker it publishes to, Celery's own errors are told from the broker's."""
    failure = partial(broker_failure, app) if app is not None else None
    return Sender(send, args, kwargs, call, options, redact_keys, failure)


def unsent(task: Task[Any, Any], job_id: str, options: Mapping[str, Any]) -> AsyncResult[Any]:
    """The ``AsyncResult`` of a job this call sent nothing for (a duplicate): ignored as
    Celery's would be (``ignore_result``, the call's or the task's)."""
    found = task.AsyncResult(job_id)
    found.ignored = bool(options.get("ignore_result", task.ignore_result))
    return found


def send_existing(task: Task[Any, Any], args: Any, kwargs: Any, options: Any) -> None:
    """Publish a message of an existing job (its headers in ``options``): no new row."""
    task.apply_async(args, kwargs, **options)
