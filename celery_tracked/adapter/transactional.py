"""Exactly-once effects on the tracking database (``docs/exactly-once.md``).

:func:`enqueue_in`: a job created in the caller's own transaction (a SQLAlchemy
``Session`` or ``Connection`` to the tracking database), published once it commits;
nothing remains after a rollback. No Redis guard is taken: the unique key constraint
decides, inside the transaction.

:func:`transaction`: the body's own transaction on the tracking database, committed with
the run's fenced completion (``store/effects.py``, ``HeldCompletion``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from celery import Task
from sqlalchemy import Connection
from sqlalchemy.orm import scoped_session

from ..core.errors import EnqueueError, NotInAStep, NotTransactional, StoreError
from ..core.hooks import Transition
from ..core.jobs import EnqueueResult, Event, JobStatus, utcnow
from ..core.messages import Control
from ..services.producer import NewJob, Publish
from ..services.sealing import EXTRA, needs_seal
from ..store import JobStore, effects
from ..store.translate import translated
from . import calls, values
from .request_state import attempt_of

if TYPE_CHECKING:
    from .celery_tracker import Tracker

logger = logging.getLogger("celery_tracked")


def _sql_store(tracker: Tracker, what: str) -> JobStore:
    store = tracker.celery_side.sql_store
    if store is None:
        raise NotTransactional(f"{what} needs the SQL store (tracked_database_url)")
    return store


def enqueue_in(
    task: Any, target: Any, args: Sequence[Any], kwargs: dict[str, Any]
) -> EnqueueResult[Any]:
    """Create ``task``'s job in ``target``'s transaction (``TrackedTask.enqueue_in``)."""
    tracker = task.tracker
    store = _sql_store(tracker, "enqueue_in")
    if isinstance(target, scoped_session):  # Flask-SQLAlchemy's ``db.session``
        target = target()
    chosen = Control.underscored(kwargs)
    options = dict(chosen.pop("options", None) or {})
    control = Control(**chosen)
    if task.app.conf.task_always_eager:
        raise NotTransactional(f"enqueue_in of {task.name}: not in eager mode (use enqueue)")
    task_id = options.pop("task_id", None)
    args, kwargs = values.sent_arguments(task, args, kwargs)
    facts = calls.of(task_id, control, options)
    job = tracker.celery_side.producer.new_job(task.description, facts, args, kwargs)
    if job.rule.reused or job.rule.debounce_s:
        raise NotTransactional(
            f"enqueue_in of {task.name}: only the default key lifetime (one job per key) "
            f"can be decided in a transaction, not {job.rule.lifetime.value!r}"
        )
    if needs_seal(job.call.payload_json, job.sealed):
        raise NotTransactional(
            f"enqueue_in of {task.name}: its arguments hold values under redacted names "
            "(tracked_redact_keys) and tracked_secret_key is not set, so if its publish "
            "after your commit failed, nothing could send it again from its row (the relay "
            f"would cancel it): set tracked_secret_key (pip install '{EXTRA}') to store "
            "them encrypted, or use enqueue()"
        )
    conn = effects.connection_of(target, store.engines)
    try:
        found = effects.insert_in(conn, job.row(), store.engines)
    except StoreError as exc:
        raise EnqueueError(f"enqueue of {task.name} failed (database): {exc}") from None
    hooks = tracker.celery_side.hooks
    if found is not None:
        message = f"job {found.id} deduplicated (key already used)"
        hooks.after_transition(
            Transition.of(
                Event.DEDUPLICATED, found.id, message, found.status, job.queue, job.job_type, 0
            )
        )
        return EnqueueResult(found.id, found.status, False)
    send = calls.Send(partial(Task.apply_async, task))  # a failure: left to the relay
    publish = tracker.celery_side.producer.message(job, facts, args, kwargs, send)
    effects.after_commit(
        target, job.job_id, partial(_hand_over, tracker, store, job, publish), store.engines
    )
    return EnqueueResult(job.job_id, JobStatus.PENDING, True)


def _hand_over(tracker: Tracker, store: JobStore, job: NewJob, publish: Publish) -> None:
    """Publish a job whose transaction committed and mark it handed over; a failure is
    left to the relay (the row stays unpublished)."""
    try:
        publish(job.headers(), job.celery_task_id or job.job_id)
    except Exception as exc:
        logger.warning(
            "job %s committed but not published (%s): the relay publishes it after "
            "tracked_relay_grace_seconds",
            job.job_id,
            type(exc).__name__,
        )
        return
    try:
        store.note_handed_over(job.job_id, utcnow(), 0)
    except StoreError as exc:  # the relay may publish it again: a duplicate never runs
        logger.warning("could not record that job %s was published: %s", job.job_id, exc)
    message = f"job {job.job_id} enqueued on {job.queue} (after its transaction committed)"
    tracker.celery_side.hooks.after_transition(
        Transition.of(Event.ENQUEUED, job.job_id, message, "pending", job.queue, job.job_type, 0)
    )


@contextmanager
def transaction(task: Any) -> Iterator[Connection]:
    """The running body's transaction on the tracking database (``TrackedTask.transaction``):
    left open at the block's end and committed with the run's completion; rolled back when
    the block raises, or the run ends any other way. A later block continues it; a block
    inside an open one is a savepoint: when it raises, only what it wrote is undone."""
    attempt = attempt_of(task.request)
    if attempt is None:
        raise NotInAStep(f"{task.name}: self.transaction() is only for a running tracked body")
    held = attempt.held
    if not isinstance(held, effects.HeldCompletion):
        store = _sql_store(task.tracker, "self.transaction()")
        held = effects.HeldCompletion(store.engines, effects.begin(store.engines))
        attempt.held = held  # now: a block inside this one continues it
    if held.depth:
        with _savepoint(held):
            yield held.conn
        return
    held.depth = 1
    try:
        yield held.conn
    except BaseException:
        attempt.held = None
        held.abandon()
        raise
    finally:
        held.depth = 0


@contextmanager
def _savepoint(held: effects.HeldCompletion) -> Iterator[None]:
    with translated("opening a savepoint"):
        nested = held.conn.begin_nested()
    held.depth += 1
    try:
        yield
    except BaseException:
        if nested.is_active:
            try:
                nested.rollback()
            except Exception as exc:  # the outer transaction is then aborted: its completion fails
                logger.warning("could not roll back to the savepoint: %s", exc)
        raise
    else:
        if nested.is_active:
            with translated("releasing a savepoint"):
                nested.commit()
    finally:
        held.depth -= 1
