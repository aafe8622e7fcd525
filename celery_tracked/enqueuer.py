"""The producer service: guard → row → message, undone on failure, deduplicated.

``Enqueuer.enqueue`` takes a prepared call and a ``publish`` callable (the Celery adapter
hands in its own send), and never calls back into the task class:

1. take the idempotency guard (``Guard``: ``SET NX`` holding the job id), or wait for the
   winner's row and return that job (``created=False``);
2. insert the pending row and its ``enqueued`` event, committed;
3. publish; if that fails, delete the row and release the guard (nothing left behind).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from .calls import PreparedCall
from .errors import EnqueueError, StoreError, mask_secrets
from .guard import Guard, GuardError
from .hooks import Hooks, Transition
from .jobs import EnqueueResult, Job, JobStatus, utcnow
from .messages import TrackedHeaders
from .store import DuplicateJob, JobStore

logger = logging.getLogger("celery_tracked")

#: How long a producer that lost the guard race waits for the winner's row.
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

    def headers(self) -> TrackedHeaders:
        return TrackedHeaders(self.job_id, self.correlation_id, self.parent_job_id, self.queue)

    def row(self) -> dict[str, object]:
        now = utcnow()
        return {
            "id": self.job_id,
            "queue_name": self.queue,
            "job_type": self.job_type,
            "task_name": self.task_name,
            "celery_task_id": self.job_id,
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

    def enqueue(
        self, job: NewJob, publish: Callable[[TrackedHeaders], None], redact_keys: tuple[str, ...]
    ) -> EnqueueResult:
        """Create ``job`` and publish it with ``publish(headers)``, or return the duplicate.

        Raises:
            EnqueueError: Redis, the database or the broker failed (nothing left behind).
        """
        parts, ttl_ms = guard_of(job, self.guard_ttl_s)
        key = self.guard.key(*parts)

        def fail(stage: str, exc: BaseException) -> EnqueueError:
            detail = mask_secrets(str(exc), job.call.secrets, redact_keys)
            self._tell(
                job, "error", "error", f"enqueue of {job.task_name} failed at {stage}: {detail}"
            )
            return EnqueueError(f"enqueue of {job.task_name} failed ({stage}): {detail}")

        try:
            holder = self._acquire(key, job.job_id, ttl_ms)
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
            self._undo(job.job_id, key)
            raise fail("broker publish", exc) from None
        self._tell(job, "enqueued", "pending", f"job {job.job_id} enqueued on {job.queue}")
        return EnqueueResult(job.job_id, JobStatus.PENDING, True)

    def _acquire(self, key: str, token: str, ttl_ms: int) -> str | None:
        """None when this producer holds the key; else the job id of the holder."""
        deadline = time.monotonic() + DUPLICATE_WAIT_S
        while True:
            holder = self.guard.acquire(key, token, ttl_ms)
            if holder is None or holder == token:
                return None
            if self.store.get(holder) is not None:
                return holder
            # the holder has not committed its row yet, or it died before doing so
            if time.monotonic() >= deadline:
                self.guard.release(key, holder)  # a stale token: only that exact one goes
                deadline = time.monotonic() + DUPLICATE_WAIT_S
                continue
            time.sleep(0.01)

    def _duplicate(self, job: NewJob, holder: str | None) -> EnqueueResult:
        try:
            found: Job | None = self.store.get(holder) if holder else None
            if found is None and job.call.key is not None:
                found = self.store.find_by_key(job.job_type, job.call.key)
            if found is None:
                found = self.store.get(job.job_id)
        except StoreError as exc:
            raise EnqueueError(f"enqueue of {job.task_name} failed (database): {exc}") from None
        if found is None:
            raise EnqueueError(f"enqueue of {job.task_name}: duplicate key but no job found; retry")
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

    def _undo(self, job_id: str, key: str) -> None:
        try:
            self.store.delete(job_id)
        except StoreError as exc:
            # the row stays: keep the guard too, so the key keeps pointing at that row
            logger.error("could not delete the row of unpublished job %s: %s", job_id, exc)
            return
        self._release(key, job_id)
