"""Sending an existing job's message again: ``Tracker.retry`` and the relay's publish.

``Tracker.retry(job_id)`` runs a ``failed`` or ``cancelled`` job again as the same job
(same id, its history kept in its events):

1. its arguments are rebuilt from ``payload_json``; where the stored payload holds
   redacted values, from their sealed copy (``tracked_secret_key``, ``sealing.py``), or
   else the caller must pass those arguments again (``arguments=``), and only those:
   anything else is refused with :class:`~celery_tracked.errors.RetryRefused` before any
   change (values given win over sealed ones, and are sealed again in their place);
2. one conditional ``UPDATE`` moves it back to ``pending`` with a new message revision and
   ``attempts`` more attempts (attempt numbers keep counting: they fence runs' outcomes);
   refused if a newer job holds its idempotency key (``key_lifetime`` other than ``row``);
3. its message is published (same task id; Celery's stored result of the old run is
   forgotten first, so ``AsyncResult(job_id).get()`` waits for the new one), then marked
   handed over. A publish that fails is undone: the job is back as it was, and the caller
   gets ``EnqueueError``.

A call re-sending the id of a job that ended (a frozen Celery signature or canvas applied
again, a ``task_id`` given twice) makes the same new round (``Resender.again``, asked by the
producer, ``enqueue.py``): from ``completed`` too, with the call's arguments, attempts and
message, as Celery runs each apply again. A re-send while the job is active stays that job.

Knows nothing of Celery: the task's description, the publish and the stored results go
through the platform port (``platform.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple

from ..core.codec import PAYLOAD_DEPTH, check_depth
from ..core.deadlines import Deadline, check_deadline, deadline_of
from ..core.description import TaskDescription
from ..core.errors import EnqueueError, JobNotFound, RetryRefused, StoreError
from ..core.fences import RetryUndo
from ..core.hooks import Hooks, Transition
from ..core.jobs import EnqueueResult, Event, Job, JobStatus, utcnow
from ..core.messages import TrackedHeaders, positive
from ..core.platform import Platform
from ..core.ports import RerunStore
from ..core.redact import Redaction
from .pipelines import fail_soft_note
from .producer import NewJob, Publish
from .rerun_arguments import Shape, granted, retry_arguments, stored_arguments, stored_reprs
from .sealing import SealBroken, Sealer, seal_call, unsealed

__all__ = [  # the argument helpers' old home (tests and callers import them from here)
    "RETRIABLE",
    "Resender",
    "granted",
    "publisher",
    "retry_arguments",
    "send_job",
    "stored_arguments",
    "stored_reprs",
]

logger = logging.getLogger("celery_tracked")

#: The statuses ``Tracker.retry`` runs again.
RETRIABLE = (JobStatus.FAILED, JobStatus.CANCELLED)
#: The statuses a re-send of a job's id runs again (``Resender.again``): every ended one.
RUN_AGAIN = (JobStatus.COMPLETED, *RETRIABLE)


class Round(NamedTuple):
    """A new round of an ended job: its attempts, its event's text, the values it is sent
    with (sealed), the secrets to mask in a failed publish's error, and when it is due (a
    re-send's ``countdown``, else its ``eta``; neither: at once)."""

    budget: int
    message: str
    sealed: str | None
    secrets: Sequence[str]
    due_in_s: float | None = None
    due_at: datetime | None = None
    #: its deadline from now on (None: the job's own kept; ``NO_DEADLINE``: none)
    deadline: Deadline | None = None


def send_job(platform: Platform, job: Job, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Publish ``job``'s current message (its revision): same task id, tracking headers,
    queue and priority, and the rest of its wait when its row is not due yet (``not_before``: a
    ``countdown``/``eta`` given at enqueue; counted on this process's clock, and a delivery
    that comes before the database's due time waits the rest of it again)."""
    argsrepr, kwargsrepr = stored_reprs(job, platform.show)
    options: dict[str, Any] = {
        "task_id": job.celery_task_id or job.id,
        "headers": TrackedHeaders.of(job).to_headers(),
        "queue": job.queue_name,
        "argsrepr": argsrepr,
        "kwargsrepr": kwargsrepr,
    }
    if job.priority is not None:  # kept by every re-publish
        options["priority"] = job.priority
    if job.not_before is not None:
        wait = (job.not_before - utcnow()).total_seconds()
        if wait > 0:
            options["countdown"] = wait
    platform.publish(job.task_name, tuple(args), dict(kwargs), options)


def publisher(platform: Platform, sealer: Sealer | None) -> Callable[[Job], None]:
    """Sends a job's message from its row (:func:`send_job` with its stored arguments, the
    sealed ones opened): the relay's and the reaper's publish. Raises ``SealBroken``
    (nothing sent) when its sealed arguments cannot be opened here."""

    def publish(job: Job) -> None:
        send_job(platform, job, *unsealed(job, sealer))

    return publish


class Resender:
    """``Tracker.retry`` (see the module's text) for one app."""

    def __init__(
        self,
        store: RerunStore,
        hooks: Hooks,
        platform: Platform,
        redaction: Redaction,
        sealer: Sealer | None = None,
    ) -> None:
        self.store = store
        self.hooks = hooks
        self.platform = platform
        self.redaction = redaction
        self.sealer = sealer

    def retry(
        self,
        job_id: str,
        arguments: Mapping[str, Any] | None,
        attempts: int | None,
        deadline: Any = None,
    ) -> bool:
        """True once the job was sent again, False if it is not ``failed``/``cancelled``
        (any more). ``deadline``: a new one (as a call's), else its own is kept.

        Raises:
            JobNotFound, RetryRefused (also: its deadline has passed and no new one was
            given), InvalidPayload (``attempts``, ``deadline``), TypeError (``deadline``),
            EnqueueError (the publish failed: undone), StoreError.
        """
        new_deadline = None if deadline is None else deadline_of(deadline, "deadline")
        if new_deadline is not None:
            check_deadline(new_deadline, None, None, utcnow(), "deadline")
        job = self.store.get(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id}")
        if job.status not in RETRIABLE:
            return False
        if new_deadline is None:
            self._refuse_past_deadline(job)
        task = self.platform.description(job.task_name)
        shape = None if task is None else task.shape
        args, kwargs = self._arguments(job, shape, arguments)
        check_depth([args, kwargs], PAYLOAD_DEPTH)  # values given again: PayloadNotSerializable
        sealed = seal_call(self.sealer, args, kwargs, job.payload_json or "")
        self._refuse_after_fail_soft(job)
        budget = positive(attempts, "attempts") or self._budget(job, task)
        message = (
            f"job {job.id} retried: runs again with {budget} more attempt(s) "
            f"(was {job.status.value} after {job.attempts_made})"
        )
        secrets = self.redaction.secret_values([dict(arguments or {}), kwargs])
        send = partial(send_job, self.platform, args=args, kwargs=kwargs)
        made = Round(budget, message, sealed, secrets, deadline=new_deadline)
        if not self._new_round(job, made, send):
            self._refuse_if_key_taken(job)
            return False
        return True

    def again(self, found: Job, job: NewJob, publish: Publish) -> EnqueueResult[Any] | None:
        """A call re-sending the id of ``found``, a job that ended (``job``: that call, as
        the producer prepared it): a new round of ``found``, as :meth:`retry` makes one,
        with the call's arguments, attempts and message (``publish``, its Celery options:
        a frozen canvas applied again runs again, as in Celery). None when it is not one
        (not ended, another task or key, its pipeline went on from its failure, or it
        moved meanwhile): the call is then a duplicate. Another producer's re-send that
        made the round first (the move found the job at a newer revision): the job as that
        one left it (``created`` False), this call publishing nothing.

        Raises:
            EnqueueError: the database or the publish failed (the job is as it was).
        """
        same = (found.task_name, found.idempotency_key) == (job.task_name, job.call.key)
        if found.status not in RUN_AGAIN or not same:
            return None
        message = (
            f"job {found.id} sent again (its task id re-sent): runs again with "
            f"{job.max_attempts} attempt(s) (was {found.status.value} after "
            f"{found.attempts_made})"
        )
        task_id = job.celery_task_id or job.job_id
        made = Round(  # the call's deadline (or none), as Celery runs each apply again
            job.max_attempts,
            message,
            job.sealed,
            job.call.secrets,
            job.due_in_s,
            job.due_at,
            job.deadline,
        )
        try:
            self._refuse_after_fail_soft(found)
            sent = self._new_round(
                found,
                made,
                lambda row: publish(TrackedHeaders.of(row), task_id),
                payload_json=job.call.payload_json,
            )
            now = None if sent else self.store.get(found.id)
        except RetryRefused:
            return None
        except StoreError as exc:
            raise EnqueueError(f"enqueue of {job.task_name} failed (database): {exc}") from None
        if sent:
            return EnqueueResult(found.id, JobStatus.PENDING, True)
        if now is not None and now.revision > found.revision:  # another re-send won
            return EnqueueResult(now.id, now.status, False)
        return None

    def _new_round(
        self,
        job: Job,
        made: Round,
        send: Callable[[Job], object],
        payload_json: str | None = None,
    ) -> bool:
        """Move ended ``job`` back to ``pending`` at its next revision (``RETRY``; any ended
        status when ``payload_json``, the re-sent arguments, is given), forget Celery's
        stored result of its last run and ``send`` its new message; undone if that fails.
        False if it moved meanwhile (or a newer job holds its key)."""
        store, resent = self.store, payload_json is not None
        if not store.retry(
            job.id,
            seen_revision=job.revision,
            budget=made.budget,
            now=utcnow(),
            message=made.message,
            secrets_sealed=made.sealed,
            payload_json=payload_json,
            completed_too=resent,
            due_in_s=made.due_in_s,
            due_at=made.due_at,
            deadline=made.deadline,
        ):
            return False
        revision = job.revision + 1
        # a re-send's message waits by its own countdown/eta; a retry's is due at once
        sent = replace(job, status=JobStatus.PENDING, revision=revision, not_before=None)
        forgotten = self.platform.forget_result(sent)
        try:
            send(sent)
        except Exception as exc:
            if forgotten is not None:
                self.platform.restore_result(sent, forgotten)
            detail = self.redaction.mask(str(exc), made.secrets)
            ended = (job.status, job.max_attempts, job.finished_at, job.retries_exhausted)
            old_payload = job.payload_json if resent else None
            store.undo_retry(
                job.id,
                RetryUndo(revision, *ended, job.secrets_sealed, old_payload, job.deadline_at),
                now=utcnow(),
                message=f"retry undone: its message could not be published: {detail}",
            )
            raise EnqueueError(f"retry of job {job.id} failed (broker publish): {detail}") from None
        try:
            store.handed_over(job.id, utcnow(), revision)
        except StoreError as exc:  # harmless: the relay may send a duplicate, which runs nothing
            logger.warning("could not record that job %s was published: %s", job.id, exc)
        self.hooks.after_transition(
            Transition.of(
                Event.RETRIED, job.id, made.message, JobStatus.PENDING, job.queue_name, job.job_type
            )
        )
        return True

    def _arguments(
        self, job: Job, shape: Shape | None, arguments: Mapping[str, Any] | None
    ) -> tuple[list[Any], dict[str, Any]]:
        """The arguments it runs again with: given again (``arguments``), or as stored with
        the sealed ones opened (``retry_arguments`` refuses what is missing)."""
        if arguments or job.secrets_sealed is None:
            return retry_arguments(job, shape, arguments or {}, self.redaction)
        try:
            return unsealed(job, self.sealer)
        except SealBroken as exc:
            raise RetryRefused(str(exc)) from None

    def _budget(self, job: Job, task: TaskDescription | None) -> int:
        """The attempts a retry gives by default: the task's ``max_attempts`` where the
        task is registered here, else what its latest round was given, as recorded (never
        the settings' default: an admin process need not import the tasks)."""
        own = None if task is None else task.retry.max_attempts
        if isinstance(own, int) and own > 0:
            return own
        return granted(job.max_attempts, self.store.retry_rounds(job.id))

    def _refuse_after_fail_soft(self, job: Job) -> None:
        """A pipeline step whose failure was followed by its fail-soft successor is not
        run again: its pipeline went on from that failure (``docs/pipelines.md``)."""
        if job.status is not JobStatus.FAILED or not job.retries_exhausted:
            return  # only a failure after the retries creates fail-soft successors
        successor = self.store.fail_soft_successor(job, fail_soft_note(job.id))
        if successor is not None:
            raise RetryRefused(
                f"job {job.id}: its failure was followed by its fail-soft successor "
                f"{successor.id} ({successor.job_type}, {successor.status.value}): its "
                "pipeline went on from that failure, and running the step again would run "
                "both of its branches; retry the successor instead, or start the pipeline again"
            )

    def _refuse_past_deadline(self, job: Job) -> None:
        """A job whose deadline has passed (the database's clock) would be cancelled again
        at once (``DeadlineExceeded``): refused unless the retry gives a new one."""
        if job.deadline_at is None or job.deadline_at > self.store.clock():
            return
        raise RetryRefused(
            f"job {job.id}: its deadline ({job.deadline_at.isoformat()}) has passed, so it "
            "would be cancelled again at once (DeadlineExceeded); give a new one: "
            "tracker.retry(job_id, deadline=timedelta(minutes=10)) (or an aware datetime), "
            "celery tracked retry JOB_ID --deadline 10m"
        )

    def _refuse_if_key_taken(self, job: Job) -> None:
        if job.idempotency_key is None:
            return
        latest = self.store.find_by_key(job.job_type, job.idempotency_key)
        if latest is not None and latest.id != job.id:
            raise RetryRefused(
                f"job {job.id}: a newer job {latest.id} holds its idempotency key "
                f"({latest.status.value}); retry that one, or enqueue again"
            )
