"""A call of a tracked task in Celery's terms: its facts, gathered once, and its publish.

:func:`of` reads what Celery tells of a call (``enqueue``/``apply_async``/``apply``,
``enqueue_in``) into one :class:`~celery_tracked.services.producer.CallFacts`, which the
``Producer`` (``services/producer.py``) makes the job from:

- its ids: the task id given (checked), else a new one; a canvas member (``group``,
  ``chain``, ``chord``, links, ``self.replace``) told apart from a plain call by the
  options Celery passes. Celery freezes a canvas member's task id before sending it and
  then waits on that id: a member deduplicated onto an existing job would publish nothing
  under it, so the canvas would wait forever, and such a duplicate is refused
  (``DuplicateInCanvas``) instead. ``self.replace(sig)`` freezes the replacement with the
  replacer's own task id: the replacement keeps that task id (Celery's results resolve
  through it) but gets a job of its own, whose parent is the replacer's job;
- its lineage: given, or inherited from the tracked task the call is made from
  (``current_task``; a chain's steps share one correlation id);
- the caller's control options, and Celery's options (checked).

:class:`Send` is the producer's one call back into Celery: the message's delivery by
``apply_async`` (or ``apply``), its ``AsyncResult`` kept for the caller, Celery's own
refusals told from a broker failure.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from celery import Celery, Task, current_task
from celery.result import AsyncResult

from ..core.errors import PublishRefused
from ..core.messages import Control, TrackedHeaders, check_job_id, check_options
from ..services.producer import CallFacts
from .broker import broker_failure

#: Options Celery sets on a signature it sends as part of a canvas.
CANVAS_OPTIONS = (
    "group_id",
    "chord",
    "chain",
    "link",
    "link_error",
    "parent_id",
    "replaced_task_nesting",
)


def of(task_id: str | None, control: Control, options: dict[str, Any]) -> CallFacts:
    """The facts of a call given ``task_id``, the caller's ``control`` options and
    Celery's ``options`` (kept in the facts: the job's making adds to them).

    Raises:
        InvalidPayload: a task id that cannot be a job id.
        TypeError: a Celery option of the wrong type.
    """
    job_id, sent_as, canvas = ids(check_job_id(task_id), options)
    check_options(options)
    parent_job_id, correlation_id = lineage(control, job_id)
    fresh = job_id != task_id  # made here: no task id was given (or a replacement's)
    return CallFacts(
        job_id, sent_as, canvas, parent_job_id, correlation_id, control, options, fresh
    )


def in_canvas(task_id: str | None, options: Mapping[str, Any]) -> bool:
    """A frozen task id sent with one of Celery's canvas options: something waits on it."""
    return task_id is not None and any(options.get(name) for name in CANVAS_OPTIONS)


def ids(task_id: str | None, options: Mapping[str, Any]) -> tuple[str, str, bool]:
    """``(job id, the message's task id, sent in a canvas)`` of a call given ``task_id``.

    The job id is the task id given, else a new one; a replacement (``self.replace``) gets
    a new job id while its message keeps the replacer's task id, frozen by Celery.
    """
    replacement = bool(options.get("replaced_task_nesting"))
    job_id = str(uuid.uuid4()) if task_id is None or replacement else task_id
    return job_id, task_id or job_id, in_canvas(task_id, options)


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


class Send:
    """The producer's ``send`` (``services/producer.Send``): ``send(args, kwargs,
    **options)``, Celery's ``apply_async`` (or ``apply``). ``sent`` is the
    ``AsyncResult`` Celery made for the last delivery (None before one, or when the
    delivery was held: eager mode). Given the ``app`` whose broker it publishes to, an
    error ``broker_failure`` does not call the broker's (Celery refused the call itself)
    is raised as ``PublishRefused``: the enqueue is undone and that error raised as it is."""

    def __init__(self, send: Callable[..., AsyncResult[Any]], app: Celery | None = None) -> None:
        self.send = send
        self.failure = partial(broker_failure, app) if app is not None else None
        self.sent: AsyncResult[Any] | None = None

    def __call__(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], options: dict[str, Any]
    ) -> AsyncResult[Any] | None:
        self.sent = None
        try:
            self.sent = self.send(args, kwargs, **options)
        except Exception as exc:
            if self.failure is None or self.failure(exc):
                raise
            raise PublishRefused(exc) from exc
        return self.sent


def unsent(task: Task[Any, Any], job_id: str, options: Mapping[str, Any]) -> AsyncResult[Any]:
    """The ``AsyncResult`` of a job this call sent nothing for (a duplicate): ignored as
    Celery's would be (``ignore_result``, the call's or the task's)."""
    found = task.AsyncResult(job_id)
    found.ignored = bool(options.get("ignore_result", task.ignore_result))
    return found


def send_existing(task: Task[Any, Any], args: Any, kwargs: Any, options: Any) -> None:
    """Publish a message of an existing job (its headers in ``options``): no new row (the
    description's ``send``)."""
    task.apply_async(args, kwargs, **options)
