"""The producer service: guard → row → message, undone on failure, deduplicated.

``Enqueuer.enqueue`` takes a prepared call and a ``publish`` callable (the Celery adapter
hands in its own send), and never calls back into the task class:

1. take the idempotency guard (``Guard``: ``SET NX`` holding the job id), or wait for the
   winner's row and return that job (``created=False``);
2. insert the pending row and its ``enqueued`` event, committed;
3. publish, then record in the row that its message was handed to the broker
   (``published_at``); if the publish fails, delete the row and release the guard (nothing
   left behind) unless a relay handed the row over meanwhile (then the job is returned).

A duplicate producer never trusts a row whose message was not handed over yet: it waits
(bounded) for the first producer's outcome, and takes the key over if that one undid its
row. A producer that died between insert and publish leaves such a row for the relay
(``relay.py``), which publishes it after ``tracked_relay_grace_seconds``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .calls import PreparedCall
from .errors import DuplicateInCanvas, EnqueueError, StoreError, mask_secrets
from .guard import Guard, GuardError
from .hooks import Hooks, Transition
from .jobs import EnqueueResult, Job, JobStatus, utcnow
from .messages import TrackedHeaders
from .store import DuplicateJob, JobStore

logger = logging.getLogger("celery_tracked")

#: How long a producer that lost the guard race waits for the winner's row, then for the
#: winner to hand its message to the broker.
DUPLICATE_WAIT_S = 5.0
#: The guard of a job without idempotency key only covers the enqueue itself.
ID_GUARD_TTL_MS = 60_000


@dataclass(frozen=True)
class NewJob:
    """Everything the producer needs to create one job."""

    job_id: str
    task_name: str
    job_type: str
    #: the queue the message goes to (also ``queue_name`` of the row)
    queue: str
    call: PreparedCall
    max_attempts: int
    #: shared by a job and every job enqueued from inside it
    correlation_id: str
    parent_job_id: str | None
    owner_id: str | None
    #: the message's task id when it is not the job id (a ``self.replace`` replacement)
    celery_task_id: str | None = None
    #: sent as part of a Celery canvas: a duplicate is refused (``DuplicateInCanvas``)
    canvas: bool = False

    def headers(self) -> TrackedHeaders:
        return TrackedHeaders(self.job_id, self.correlation_id, self.parent_job_id, self.queue)

    def row(self) -> dict[str, object]:
        now = utcnow()
        return {
            "id": self.job_id,
            "queue_name": self.queue,
            "job_type": self.job_type,
            "task_name": self.task_name,
            "celery_task_id": self.celery_task_id or self.job_id,
            "status": JobStatus.PENDING.value,
            "payload_json": self.call.payload_json,
            "max_attempts": self.max_attempts,
            "idempotency_key": self.call.key,
            "correlation_id": self.correlation_id,
            "parent_job_id": self.parent_job_id,
            "owner_id": self.owner_id,
            "created_at": now,
            "updated_at": now,
        }


def guard_of(job: NewJob, guard_ttl_s: int) -> tuple[tuple[str, ...], int]:
    """The guard key's parts and its TTL (ms): per ``(job_type, key)`` for the key's
    lifetime, else per job id for the enqueue itself (an explicit ``task_id`` given twice
    is one job)."""
    if job.call.key is not None:
        return ("guard", job.job_type, job.call.key), guard_ttl_s * 1000
    return ("guard", "id", job.job_id), min(ID_GUARD_TTL_MS, guard_ttl_s * 1000)


class Enqueuer:
    """Creates jobs: one per idempotency key, never a row without its message."""

    def __init__(self, store: JobStore, guard: Guard, guard_ttl_s: int, hooks: Hooks) -> None:
        self.store = store
        self.guard = guard
        self.guard_ttl_s = guard_ttl_s
        self.hooks = hooks
        self.duplicate_wait_s = DUPLICATE_WAIT_S

    def enqueue(
        self, job: NewJob, publish: Callable[[TrackedHeaders], object], redact_keys: tuple[str, ...]
    ) -> EnqueueResult[Any]:
        """Create ``job`` and publish it with ``publish(headers)``, or return the duplicate.

        Raises:
            EnqueueError: Redis, the database or the broker failed (nothing left behind).
            DuplicateInCanvas: ``job`` is a canvas member and its key is taken.
        """
        parts, ttl_ms = guard_of(job, self.guard_ttl_s)
        key = self.guard.key(*parts)

        def fail(stage: str, exc: BaseException, note: str = "") -> EnqueueError:
            detail = mask_secrets(str(exc), job.call.secrets, redact_keys) + note
            self._tell(
                job, "error", "error", f"enqueue of {job.task_name} failed at {stage}: {detail}"
            )
            return EnqueueError(f"enqueue of {job.task_name} failed ({stage}): {detail}")

        try:
            holder = self._acquire(job, key, ttl_ms)
        except (GuardError, StoreError) as exc:
            raise fail(
                "idempotency guard" if isinstance(exc, GuardError) else "database", exc
            ) from None
        if holder is not None:
            return self._duplicate(job, holder)
        try:
            self.store.insert(job.row())
        except DuplicateJob:
            self._release(key, job.job_id)
            return self._duplicate(job, None)
        except StoreError as exc:
            self._release(key, job.job_id)
            raise fail("database", exc) from None
        try:
            publish(job.headers())
        except Exception as exc:
            try:
                kept = self._undo(job.job_id, key)
            except StoreError as undo_exc:
                raise fail("broker publish", exc, _kept(job.job_id, undo_exc)) from None
            if kept is not None:  # a relay handed it over meanwhile: the job exists and runs
                return EnqueueResult(kept.id, kept.status, True)
            raise fail("broker publish", exc) from None
        self._handed_over(job.job_id)
        self._tell(job, "enqueued", "pending", f"job {job.job_id} enqueued on {job.queue}")
        return EnqueueResult(job.job_id, JobStatus.PENDING, True)

    def _acquire(self, job: NewJob, key: str, ttl_ms: int) -> str | None:
        """None when this producer holds the key; else the job id of the holder, once the
        holder's message was handed to the broker."""
        deadline = time.monotonic() + self.duplicate_wait_s
        while True:
            holder = self.guard.acquire(key, job.job_id, ttl_ms)
            if holder is None or holder == job.job_id:
                return None
            found = self.store.get(holder)
            if found is not None:
                if self._settled(job, found) is not None:
                    return holder
                continue  # the holder undid its enqueue: the key is free again
            # the holder has not committed its row yet, or it died before doing so
            if time.monotonic() >= deadline:
                self.guard.release(key, holder)  # a stale token: only that exact one goes
                deadline = time.monotonic() + self.duplicate_wait_s
                continue
            time.sleep(0.01)

    def _settled(self, job: NewJob, found: Job) -> Job | None:
        """``found`` once its message was handed to the broker (or it moved on), None once
        its row is gone (its producer's publish failed). Waits at most the duplicate wait.

        Raises:
            EnqueueError: its producer is still publishing (or died: the relay publishes
                the row after the grace period); retryable.
        """
        deadline = time.monotonic() + self.duplicate_wait_s
        current: Job | None = found
        while current is not None and current.published_at is None:
            if current.status is not JobStatus.PENDING:
                break
            if time.monotonic() >= deadline:
                raise EnqueueError(
                    f"enqueue of {job.task_name}: job {current.id} holds this idempotency "
                    "key but its message was not handed to the broker yet; retry later"
                )
            time.sleep(0.02)
            current = self.store.get(current.id)
        return current

    def _duplicate(self, job: NewJob, holder: str | None) -> EnqueueResult[Any]:
        try:
            found: Job | None = self.store.get(holder) if holder else None
            if found is None and job.call.key is not None:
                found = self.store.find_by_key(job.job_type, job.call.key)
            if found is None:
                found = self.store.get(job.job_id)
            found = None if found is None else self._settled(job, found)
        except StoreError as exc:
            raise EnqueueError(f"enqueue of {job.task_name} failed (database): {exc}") from None
        if found is None:
            raise EnqueueError(f"enqueue of {job.task_name}: duplicate key but no job found; retry")
        if job.canvas:
            raise DuplicateInCanvas(job.task_name, found.id, job.celery_task_id or job.job_id)
        message = f"job {found.id} deduplicated (key already used)"
        self.hooks.after_transition(
            Transition(
                found.id, "deduplicated", found.status.value, message, job.queue, job.job_type, 0
            )
        )
        return EnqueueResult(found.id, found.status, False)

    def _tell(self, job: NewJob, event: str, status: str, message: str) -> None:
        level = logging.ERROR if event == "error" else logging.INFO
        self.hooks.after_transition(
            Transition(job.job_id, event, status, message, job.queue, job.job_type, 0, level=level)
        )

    def _release(self, key: str, token: str) -> None:
        try:
            self.guard.release(key, token)
        except GuardError as exc:
            logger.warning("could not release guard key: %s (it expires by itself)", exc)

    def _undo(self, job_id: str, key: str) -> Job | None:
        """Delete the row of a job whose publish failed and release the guard; returns
        the job instead if a relay handed it over meanwhile (the guard then stays).

        Raises:
            StoreError: the row could not be deleted (the guard stays, pointing at it).
        """
        if not self.store.undo(job_id):
            kept = self.store.get(job_id)
            if kept is not None:
                return kept
        self._release(key, job_id)
        return None

    def _handed_over(self, job_id: str) -> None:
        try:
            self.store.handed_over(job_id, utcnow())
        except StoreError as exc:
            # harmless: the relay may publish it again, and a duplicate delivery never runs
            logger.warning("could not record that job %s was published: %s", job_id, exc)


def _kept(job_id: str, exc: StoreError) -> str:
    """What a caller must know when the row of a failed enqueue could not be removed."""
    return (
        f"; its row could not be removed ({exc}): job {job_id} will be published by the "
        "relay after tracked_relay_grace_seconds unless you cancel it"
    )
