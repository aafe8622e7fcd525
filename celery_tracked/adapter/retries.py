"""Celery's ``retry`` on a tracked job, for ``TrackedTask`` (``task.py``): two callers,
two functions.

- The tracker's own re-publish (:func:`republish`: a ``Retrying`` or ``Postponed``
  verdict) calls Celery's ``Task.retry`` itself, never bounded by Celery's counter
  (``UNLIMITED``: attempts are the tracker's); a postponement keeps the message's
  ``retries`` count (:func:`counted`): ``retries`` is always the retries made, attempt - 1.
- The body's own ``self.retry`` (``TrackedTask.retry``) keeps Celery's meaning
  (:func:`limit`, :func:`retrying`): it is bounded by the job's attempts, so on the last
  one (or once the call's own ``max_retries`` is reached) Celery raises the body's
  exception, or ``MaxRetriesExceededError``, instead of re-publishing; the running attempt
  (``attempt.py``, kept on the request: ``request_state.py``) keeps that error, and the
  time of a re-publish.
- A re-publish the broker refused is requeued, never dropped (:func:`requeue_refused`).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NoReturn

from celery import Task
from celery.exceptions import Reject, Retry

from ..core.attempt import Attempt
from ..core.jobs import Job, utcnow
from ..core.messages import TrackedHeaders
from ..core.retry_policy import CELERY_SEMANTICS, RetryPolicy

#: Celery's ``max_retries`` of the tracker's own re-publishes: attempts are the tracker's.
UNLIMITED = sys.maxsize


def republish(
    task: Any,
    countdown: float,
    exc: Exception | None = None,
    headers: Mapping[str, Any] | None = None,
    attempt: bool = True,
) -> NoReturn:
    """Deliver ``task``'s running message again (same task id and headers, ``headers``
    added) after ``countdown`` s, by Celery's own ``Task.retry``: the next attempt, or
    (``attempt`` false: a postponement) this delivery again, its ``retries`` count kept.
    Celery's retry limit never applies (attempts are the tracker's).

    Raises:
        Retry: re-published (the request's arguments are then redacted).
        Reject: the broker refused it: requeued.
    """
    options: dict[str, Any] = {}
    if headers:
        options["headers"] = {**(task.request.headers or {}), **headers}
    try:
        with counted(task.request, attempt), requeue_refused():
            raise Task.retry(task, exc=exc, countdown=countdown, max_retries=UNLIMITED, **options)
    except Retry:
        hide_arguments(task)  # re-published: Celery now only stores the request
        raise


def limit(running: Attempt | None, max_retries: int | None) -> int:
    """Celery's ``max_retries`` for the body's ``self.retry``: in a tracked run, the job's
    own (the call's ``max_retries`` if smaller); outside one (an untracked delivery, a
    direct call), the call's, else unlimited."""
    if running is None:
        return UNLIMITED if max_retries is None else max_retries
    if max_retries is None:
        return running.max_retries
    return min(max_retries, running.max_retries)


@contextmanager
def retrying(running: Attempt | None) -> Iterator[None]:
    """Around Celery's ``retry`` of the body's ``self.retry``: a re-publish the broker
    refused is requeued; in a tracked run, the time it re-publishes and the error Celery
    raises once no retry remains are kept in its attempt."""
    if running is not None:
        running.retrying(utcnow())  # a countdown counts from here
    try:
        with requeue_refused():
            yield
    except (Retry, Reject):
        raise
    except Exception as error:  # no retry left: Celery raised ``exc`` or its own
        if running is not None:
            running.give_up(error)
        raise


@contextmanager
def counted(request: Any, attempt: bool) -> Iterator[None]:
    """Celery publishes ``request.retries + 1``: right for the next attempt, while a
    postponement (``attempt`` false: no attempt was made) keeps the count it came with."""
    made = request.retries
    if not attempt:
        request.retries = made - 1
    try:
        yield
    finally:
        request.retries = made


@contextmanager
def requeue_refused() -> Iterator[None]:
    """Celery's ``retry`` turns a failed re-publish into ``Reject(requeue=False)``: the
    message would be dropped. Requeue it instead."""
    try:
        yield
    except Reject as reject:
        if getattr(reject, "requeue", False):
            raise
        raise Reject(getattr(reject, "reason", None), requeue=True) from None


def retry_delay(task: Any, attempt: int, killed: BaseException | None = None) -> int | None:
    """The delay after failed attempt ``attempt`` by ``task``'s retry policy, ms. None
    when a run ``killed`` by the hard time limit is not retried: under Celery's retry
    semantics, unless ``autoretry_for`` covers the error (plain Celery fails it)."""
    settings = task.tracker.settings
    policy: RetryPolicy = task.description.retry
    if killed is not None and policy.semantics == CELERY_SEMANTICS and not policy.retries(killed):
        return None
    return policy.delay_ms(
        attempt, settings.default_backoff_ms, settings.max_backoff_ms, random.random
    )


def publish_again(task: Any, args: Any, kwargs: Any, job: Job, countdown: float) -> None:
    """Publish ``job``'s message again from the worker's main process (no request there:
    the tracked headers come from the row; ``retries``: the attempts made)."""
    headers = TrackedHeaders.of(job).to_headers()
    queue, made = job.queue_name, job.attempts_made
    task.apply_async(args, kwargs, headers=headers, countdown=countdown, queue=queue, retries=made)


def hide_arguments(task: Any) -> None:
    """Redact the request's arguments once nothing is re-published from them (Celery
    stores them in the result backend with ``result_extended=True``)."""
    req, masking = task.request, task.tracker.settings.masking
    req.args, req.kwargs = task.description.shape.redacted(
        req.args or (), req.kwargs or {}, masking
    )
