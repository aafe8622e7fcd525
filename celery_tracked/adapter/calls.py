"""The producer side of a tracked task: a Celery call resolved into the job to create.

:func:`new_job` turns a task's call (arguments, ``task_id``, control options, Celery's
options) into a ``NewJob`` (``services/producer.py``): Celery's view of it (the ids of
a canvas member or a ``self.replace`` replacement, the lineage inherited from the calling
task) added to what ``producer.py`` makes of the call by the task's description (the
prepared call, the queue as Celery would route it, the task's attempts and key lifetime).
Used by ``enqueue``/``apply_async``/``apply``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery import current_task

from ..core.description import TaskDescription
from ..core.messages import Control, TrackedHeaders, check_job_id, check_options
from ..core.settings import Settings
from ..services import producer
from ..services.producer import NewJob
from . import canvas


def new_job(
    task: TaskDescription,
    settings: Settings,
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
    job_id, sent_as, in_canvas = canvas.ids(check_job_id(task_id), options)
    check_options(options)
    parent_job_id, correlation_id = lineage(control, job_id)
    fresh = job_id != task_id  # made here: no task id was given (or a replacement's)
    ids = producer.Ids(job_id, sent_as, in_canvas, parent_job_id, correlation_id, fresh)
    return producer.new_job(task, settings, args, kwargs, control, options, ids)


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
