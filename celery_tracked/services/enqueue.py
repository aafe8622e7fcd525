"""The enqueue of a new job: guard → row → message, undone on failure, deduplicated.

``Enqueuer.enqueue`` (given the ``NewJob`` and its ``publish`` by the ``Producer``,
``producer.py``): take the idempotency guard or return the holder's job; insert the
pending row and its event, committed; publish, then mark the row handed over
(``published_at``). A failed publish deletes the row and releases the guard, unless a
relay handed it over meanwhile. A duplicate waits (bounded) for a row not handed over
yet; a producer that died between insert and publish leaves the row to the relay
(``relay.py``)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..core.deadlines import held_row
from ..core.errors import (
    DuplicateInCanvas,
    DuplicateJob,
    EnqueueError,
    GuardError,
    PublishRefused,
    StoreError,
    TaskIdInUse,
)
from ..core.guard import Guard
from ..core.hooks import Hooks, Transition
from ..core.jobs import EnqueueResult, Event, Job, JobStatus, utcnow
from ..core.keys import Then, then, undo_replace
from ..core.messages import TrackedHeaders
from ..core.ports import EnqueueStore
from ..core.redact import Redaction
from .producer import NewJob, Publish, guard_of

logger = logging.getLogger("celery_tracked")

#: How long a producer that lost the guard race waits for the winner's row, then for the
#: winner to hand its message to the broker.
DUPLICATE_WAIT_S = 5.0
#: How often an enqueue decides again when its key changes hands (randomly paused).
_ROUNDS_TRIED = 60
#: ``again(found, job, publish)``: a new round of ``found``, an ended job whose id ``job``
#: re-sends (``Resender.again``); None: ``job`` is a duplicate of it.
Again = Callable[["Job", "NewJob", Publish], "EnqueueResult[Any] | None"]


class Enqueuer:
    """Creates jobs: one per idempotency key, never a row without its message."""

    def __init__(self, store: EnqueueStore, guard: Guard, guard_ttl_s: int, hooks: Hooks) -> None:
        self.store = store
        self.guard = guard
        self.guard_ttl_s = guard_ttl_s
        self.hooks = hooks
        self.duplicate_wait_s = DUPLICATE_WAIT_S
        self.again: Again | None = None  # set by the tracker (its ``Resender``)

    def enqueue(self, job: NewJob, publish: Publish, redaction: Redaction) -> EnqueueResult[Any]:
        """Create ``job`` and publish it with ``publish(headers, task_id)``, or return the
        key's job (a duplicate, or a pending job whose arguments a debounce replaced).

        Raises:
            EnqueueError: Redis, the database or the broker failed (nothing left behind).
            DuplicateInCanvas: ``job`` is a canvas member and its key is taken.
            Exception: the error of a ``PublishRefused`` (nothing left behind).
        """
        guarded = guard_of(job, self.guard_ttl_s)
        key, ttl_ms = (None, 0) if guarded is None else (self.guard.key(*guarded[0]), guarded[1])
        for tried in range(_ROUNDS_TRIED):
            if tried:
                time.sleep(random.uniform(0, 0.002 * min(tried, 10)))
            try:
                holder = self._acquire(job, key, ttl_ms)
                latest = holder if holder is not None else self._latest(job)
                now = self.store.clock() if job.rule.timed else None
            except (GuardError, StoreError) as exc:
                stage = "idempotency guard" if isinstance(exc, GuardError) else "database"
                raise self._failure(job, redaction, stage, exc) from None
            key_round = 0
            if latest is not None:
                decided = then(job.rule, latest, now or utcnow())
                if decided is Then.NEW_ROUND and holder is not None:
                    self._release(key, holder.id)  # the key is free: take it, then decide again
                    continue
                if decided is not Then.NEW_ROUND:
                    if holder is None:
                        self._release(key, job.job_id)
                    if decided is Then.DUPLICATE:
                        return self._duplicate_of(job, latest, publish)
                    replaced = self._replace(job, latest, publish, redaction)
                    if replaced is not None:
                        return replaced
                    continue  # it moved on meanwhile: decide again
                key_round = latest.key_round + 1
            try:
                self.store.insert(job.row(key_round, now))
            except DuplicateJob:
                self._release(key, job.job_id)
                if job.rule.reused and not self._exists(job):
                    continue  # another producer created this round: decide again
                duplicate = self._duplicate(job, publish)
                if duplicate is None:
                    continue  # the job it collided with was undone meanwhile: decide again
                return duplicate
            except StoreError as exc:
                self._release(key, job.job_id)
                raise self._failure(job, redaction, "database", exc) from None
            return self._publish(job, key, publish, redaction)
        raise EnqueueError(
            f"enqueue of {job.task_name}: its idempotency key kept changing hands; retry"
        )

    def _publish(
        self, job: NewJob, key: str | None, publish: Publish, redaction: Redaction
    ) -> EnqueueResult[Any]:
        if job.held:  # due beyond the horizon: no message yet, the scheduler pass sends it
            told = f"job {job.job_id} enqueued on {job.queue}, held until due (scheduled)"
            self._tell(job, Event.ENQUEUED, "pending", told)
            return EnqueueResult(job.job_id, JobStatus.PENDING, True)
        try:
            publish(job.headers(), job.celery_task_id or job.job_id)
        except Exception as exc:
            try:
                kept = self._undo(job.job_id, key)
            except StoreError as undo_exc:
                note = _kept(job.job_id, undo_exc)
                raise self._failure(job, redaction, "broker publish", exc, note) from None
            if kept is not None:  # a relay handed it over meanwhile: the job exists and runs
                return EnqueueResult(kept.id, kept.status, True)
            if isinstance(exc, PublishRefused):
                raise exc.error from exc.error.__cause__
            raise self._failure(job, redaction, "broker publish", exc) from None
        self._handed_over(job.job_id, 0)
        self._tell(job, Event.ENQUEUED, "pending", f"job {job.job_id} enqueued on {job.queue}")
        return EnqueueResult(job.job_id, JobStatus.PENDING, True)

    def _failure(
        self,
        job: NewJob,
        redaction: Redaction,
        stage: str,
        exc: BaseException,
        note: str = "",
    ) -> EnqueueError:
        detail = redaction.mask(str(exc), job.call.secrets) + note
        message = f"enqueue of {job.task_name} failed at {stage}: {detail}"
        self._tell(job, Event.ERROR, "error", message)
        return EnqueueError(f"enqueue of {job.task_name} failed ({stage}): {detail}")

    def _acquire(self, job: NewJob, key: str | None, ttl_ms: int) -> Job | None:
        """None when this producer holds the key; else the holder's job, once its message
        was handed to the broker.

        A holder whose row does not exist is never waited for, whatever the reason (its
        producer has not inserted yet, undid its enqueue, died, or the row was deleted by
        hand): its token is dropped and the key taken at once. The database's unique
        constraint then decides between this producer and one still about to insert: the
        loser's insert collides and it returns the winner's job (``_duplicate``).
        """
        if key is None:
            return None
        for _ in range(_ROUNDS_TRIED):
            holder = self.guard.acquire(key, job.job_id, ttl_ms)
            if holder is None or holder == job.job_id:
                return None
            found = self.store.get(holder)
            if found is None:
                self.guard.release(key, holder)  # only that exact token goes
                continue
            settled = self._settled(job, found)
            if settled is not None:
                return settled
            # the holder undid its enqueue: the key is free again
        raise EnqueueError(
            f"enqueue of {job.task_name}: its idempotency key kept changing hands; retry"
        )

    def _exists(self, job: NewJob) -> bool:
        try:
            return self.store.get(job.job_id) is not None
        except StoreError as exc:
            raise EnqueueError(f"enqueue of {job.task_name} failed (database): {exc}") from None

    def _latest(self, job: NewJob) -> Job | None:
        """The key's newest job, when the task's key lifetime lets a key have several
        (else None: the insert's unique constraint decides)."""
        if job.call.key is None or not job.rule.reused:
            return None
        found = self.store.find_by_key(job.job_type, job.call.key)
        return None if found is None else self._settled(job, found)

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
            if current.status is not JobStatus.PENDING or held_row(current, job.horizon_s):
                break  # moved on, or held: no producer publishes it, the scheduler pass does
            if time.monotonic() >= deadline:
                raise EnqueueError(
                    f"enqueue of {job.task_name}: job {current.id} holds this idempotency "
                    "key but its message was not handed to the broker yet; retry later"
                )
            time.sleep(0.02)
            current = self.store.get(current.id)
        return current

    def _duplicate(self, job: NewJob, publish: Publish) -> EnqueueResult[Any] | None:
        """The job an insert collided with: this very id (a ``task_id`` given twice), else
        the key's newest job; None when that job is gone meanwhile (its enqueue undone)."""
        try:
            found = self.store.get(job.job_id)
            if found is None and job.call.key is not None:
                found = self.store.find_by_key(job.job_type, job.call.key)
            found = None if found is None else self._settled(job, found)
        except StoreError as exc:
            raise EnqueueError(f"enqueue of {job.task_name} failed (database): {exc}") from None
        return None if found is None else self._duplicate_of(job, found, publish)

    def _duplicate_of(self, job: NewJob, found: Job, publish: Publish) -> EnqueueResult[Any]:
        """``found``, the job ``job`` duplicates; a new round of it when ``job`` re-sends
        its id after it ended (``again``).

        Raises:
            TaskIdInUse: ``found`` has ``job``'s id but is a job of another task.
            DuplicateInCanvas: ``job`` is a canvas member."""
        if found.id == job.job_id and found.task_name != job.task_name:
            given = job.celery_task_id or job.job_id
            raise TaskIdInUse(job.task_name, found.task_name, found.id, given)
        if found.id == job.job_id and found.status.terminal and self.again is not None:
            again = self.again(found, job, publish)
            if again is not None:
                return again
        if job.canvas:
            raise DuplicateInCanvas(job.task_name, found.id, job.celery_task_id or job.job_id)
        message = f"job {found.id} deduplicated (key already used)"
        told = (Event.DEDUPLICATED, found.id, message, found.status, job.queue, job.job_type, 0)
        self.hooks.after_transition(Transition.of(*told))
        return EnqueueResult(found.id, found.status, False)

    def _replace(
        self, job: NewJob, pending: Job, publish: Publish, redaction: Redaction
    ) -> EnqueueResult[Any] | None:
        """Debounce: give the pending job ``job``'s arguments and a new message; None when
        it is no longer pending at the revision read (the caller decides again)."""
        if job.canvas:
            raise DuplicateInCanvas(job.task_name, pending.id, job.celery_task_id or job.job_id)
        made = pending.revision + 1
        message = f"job {pending.id} debounced: arguments replaced (revision {made})"
        try:
            if not self.store.replace_arguments(
                pending.id,
                seen_revision=pending.revision,
                payload_json=job.call.payload_json,
                now=utcnow(),
                message=message,
                secrets_sealed=job.sealed,
                due_in_s=job.due_in_s,
                due_at=job.due_at,
            ):
                return None
            if not job.held:  # else its new due time is beyond the horizon: the pass sends it
                publish(
                    replace(TrackedHeaders.of(pending), revision=made),
                    pending.celery_task_id or pending.id,
                )
        except StoreError as exc:
            raise self._failure(job, redaction, "database", exc) from None
        except Exception as exc:
            note = self._undo_replace(pending, made)
            if isinstance(exc, PublishRefused):
                raise exc.error from exc.error.__cause__
            raise self._failure(job, redaction, "broker publish", exc, note) from None
        if not job.held:
            self._handed_over(pending.id, made)
        self.hooks.after_transition(
            Transition.of(
                Event.DEBOUNCED, pending.id, message, JobStatus.PENDING, job.queue, job.job_type, 0
            )
        )
        return EnqueueResult(pending.id, JobStatus.PENDING, False)

    def _undo_replace(self, pending: Job, made: int) -> str:
        """Give back the arguments a failed debounce publish replaced (``keys.undo_replace``:
        at a newer revision, left to the relay); what the caller must know."""
        undo = undo_replace(pending, made)
        try:
            undone = self.store.undo_replace(
                pending.id,
                made,
                undo,
                now=utcnow(),
                message=(
                    "debounce undone: its message could not be published; the previous "
                    f"arguments are published by the relay (revision {undo.revision})"
                ),
            )
        except StoreError as exc:
            return (
                f"; job {pending.id} keeps the new arguments ({exc}): the relay publishes it "
                "after tracked_relay_grace_seconds"
            )
        if not undone:  # handed over (by a relay), started, or replaced again meanwhile
            return f"; job {pending.id} moved on meanwhile and was left as it is"
        return (
            f"; job {pending.id} keeps its previous arguments: the relay publishes it after "
            "tracked_relay_grace_seconds"
        )

    def _tell(self, job: NewJob, event: Event, status: str, message: str) -> None:
        level = logging.ERROR if event is Event.ERROR else logging.INFO
        told = (event, job.job_id, message, status, job.queue, job.job_type, 0)
        self.hooks.after_transition(Transition.of(*told, level=level))

    def _release(self, key: str | None, token: str) -> None:
        if key is None:
            return
        try:
            self.guard.release(key, token)
        except GuardError as exc:
            logger.warning("could not release guard key: %s (it expires by itself)", exc)

    def _undo(self, job_id: str, key: str | None) -> Job | None:
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

    def _handed_over(self, job_id: str, revision: int) -> None:
        try:
            self.store.note_handed_over(job_id, utcnow(), revision)
        except StoreError as exc:
            # harmless: the relay may publish it again, and a duplicate delivery never runs
            logger.warning("could not record that job %s was published: %s", job_id, exc)


def _kept(job_id: str, exc: StoreError) -> str:
    """What a caller must know when the row of a failed enqueue could not be removed."""
    return (
        f"; its row could not be removed ({exc}): job {job_id} will be published by the "
        "relay after tracked_relay_grace_seconds unless you cancel it"
    )
