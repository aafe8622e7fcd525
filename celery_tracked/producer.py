"""The producer side of a tracked task: a call resolved into the job to create.

:func:`new_job` turns a task's call (arguments, ``task_id``, control options, Celery's
options) into a :class:`~celery_tracked.enqueuer.NewJob`: the ids (a canvas member's, a
``self.replace`` replacement's), the prepared call (``calls.py``), the queue as Celery
would route it, the lineage inherited from the calling task, and the task's attempts and
key lifetime. Used by ``enqueue``/``apply_async``/``apply`` and by a step's successors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from celery import current_task

from . import canvas
from .calls import CallRules, prepare_call
from .enqueuer import NewJob
from .messages import Control, TrackedHeaders, check_job_id, check_options, check_text

if TYPE_CHECKING:
    from .task import TrackedTask


def new_job(
    task: TrackedTask[Any, Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    task_id: str | None,
    control: Control,
    options: dict[str, Any],
) -> NewJob:
    """The job a call of ``task`` creates; ``options`` (Celery's) get the queue and a
    debounce's delay.

    Raises:
        InvalidPayload: (or a subclass) the call was refused.
        TypeError: a Celery option of the wrong type.
    """
    settings = task.tracker.settings
    job_id, sent_as, in_canvas = canvas.ids(check_job_id(task_id), options)
    check_options(options)
    rules = CallRules(
        task_name=task.name,
        redact_keys=settings.redact_keys,
        max_payload_bytes=settings.max_payload_bytes,
        validator=task._static("validator"),
        key=task._static("idempotency_key"),
        concurrency_key=task._tracked_limits.concurrency_key,
    )
    call = prepare_call(task._shape(), rules, args, kwargs, control.idempotency_key)
    queue = check_text(task._queue_name(options, args, kwargs), "queue", 200)
    if "queue" not in options and task._static("tracked_queue"):
        options["queue"] = queue
    parent_job_id, correlation_id = lineage(control, job_id)
    job = NewJob(
        job_id=job_id,
        task_name=task.name,
        job_type=check_text(task.tracked_job_type, "job_type", 200),
        queue=queue,
        call=call,
        max_attempts=control.max_attempts
        or (task._tracked_retry.max_attempts or settings.default_attempts),
        correlation_id=correlation_id,
        parent_job_id=parent_job_id,
        owner_id=control.owner_id,
        celery_task_id=sent_as,
        canvas=in_canvas,
        key_rule=task._tracked_keys,
        concurrency_key=call.concurrency_key,
    )
    debounce(job, options)
    return job


def lineage(control: Control, job_id: str) -> tuple[str | None, str]:
    """``(parent_job_id, correlation_id)``: given, or inherited from the tracked task this
    call is made from (a chain's steps share one correlation id)."""
    parent, correlation = control.parent_job_id, control.correlation_id
    caller = current_task if current_task else None  # a proxy: falsy when no task runs
    if caller is not None and not caller.request.called_directly:
        calling = TrackedHeaders.read(caller.request.headers, caller.request)
        if calling is not None:
            parent = parent if parent is not None else calling.job_id
            correlation = correlation if correlation is not None else calling.correlation_id
    return parent, correlation if correlation is not None else job_id


def debounce(job: NewJob, options: dict[str, Any]) -> None:
    """``debounce_s``: every enqueue of a keyed job pushes its start that much later,
    unless the call gives its own ``countdown``/``eta``."""
    delay = job.rule.debounce_s
    if delay and options.get("countdown") is None and options.get("eta") is None:
        options["countdown"] = delay
