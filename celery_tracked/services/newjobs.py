"""A call of a described task turned into the job to create (a ``NewJob``).

Shared by the producer (``producer.py``: ``enqueue``/``apply_async``/``apply``) and a
step's successors (``successors.py``): the call prepared and checked (``calls.py``), the
queue (``TaskDescription.queue``), the task's attempts and key lifetime, and a debounce's
delay. Knows nothing of Celery: the ids and the lineage are given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from ..core.calls import prepare_call
from ..core.description import TaskDescription
from ..core.messages import Control, check_text
from ..core.settings import Settings
from .enqueuer import NewJob
from .sealing import seal_call, sealer_for


@dataclass(frozen=True)
class Ids:
    """A new job's ids (its own, its message's task id, and whether a canvas sent it)
    and lineage (its parent job and correlation id)."""

    job_id: str
    sent_as: str | None
    in_canvas: bool
    parent_job_id: str | None
    correlation_id: str
    #: the job id was made for this call (no task id was given)
    fresh: bool = False


def new_job(
    task: TaskDescription,
    settings: Settings,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    control: Control,
    options: dict[str, Any],
    ids: Ids,
) -> NewJob:
    """The job a call of ``task`` creates; ``options`` (the message's) get the queue the
    task pins and a debounce's delay.

    Raises:
        InvalidPayload: (or a subclass) the call was refused.
    """
    rules = task.call_rules(settings.redact_keys, settings.max_payload_bytes)
    call = prepare_call(task.shape, rules, args, kwargs, control.idempotency_key)
    queue = check_text(task.queue(options, args, kwargs), "queue", 200)
    if "queue" not in options and task.pins_queue:
        options["queue"] = queue
    job = NewJob(
        job_id=ids.job_id,
        task_name=task.name,
        job_type=check_text(task.job_type, "job_type", 200),
        queue=queue,
        call=call,
        max_attempts=control.max_attempts or task.attempts(settings.default_attempts),
        correlation_id=ids.correlation_id,
        parent_job_id=ids.parent_job_id,
        owner_id=control.owner_id,
        celery_task_id=ids.sent_as,
        canvas=ids.in_canvas,
        key_rule=task.keys,
        concurrency_key=call.concurrency_key,
        fresh_id=ids.fresh,
        sealed=seal_call(sealer_for(settings.secret_key), args, kwargs, call.payload_json),
    )
    debounce(job, options)
    return due(job, options)


def due(job: NewJob, options: Mapping[str, Any]) -> NewJob:
    """``job`` due when its message is (``not_before``): after its ``countdown`` (counted on
    the database's clock from the insert; it wins over an ``eta``, as in Celery), else at
    its ``eta`` (a naive one read as UTC, as Celery reads it). Checked by ``check_options``."""
    countdown, eta = options.get("countdown"), options.get("eta")
    if countdown is not None:
        return replace(job, due_in_s=float(countdown))
    if isinstance(eta, str):
        eta = datetime.fromisoformat(eta)
    if isinstance(eta, datetime):
        at = eta if eta.tzinfo is not None else eta.replace(tzinfo=timezone.utc)
        return replace(job, due_at=at.astimezone(timezone.utc))
    return job


def debounce(job: NewJob, options: dict[str, Any]) -> None:
    """``debounce_s``: every enqueue of a keyed job pushes its start that much later,
    unless the call gives its own ``countdown``/``eta``."""
    delay = job.rule.debounce_s
    if delay and options.get("countdown") is None and options.get("eta") is None:
        options["countdown"] = delay
