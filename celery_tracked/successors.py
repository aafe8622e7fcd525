"""Self-chaining pipelines: a running step declares its successors (``self.then``).

A successor is a job like any other, declared from inside a tracked task's body and
created **with the step's completion**: its row (``pending``, not yet published) is
inserted by the :class:`Successors` hook in the very transaction that marks the step
``completed``, and its message is published only after that commit. So a successor exists
if and only if its step completed, and a step that runs again (a redelivery, a retry after
a crash, a lost completion write) never creates a second one: only one completion of a job
is ever written. A process that dies between the commit and the publish leaves the row to
the relay (``relay.py``), which publishes it after ``tracked_relay_grace_seconds``.

A successor inherits the step's ``correlation_id`` and gets ``parent_job_id`` = the step;
its idempotency key is the one its task builds (its template, or a key given with
``self.successor(task, idempotency_key=...)``), else a deterministic one from the step,
the successor's job type and its arguments. A successor whose key another job holds is not
created (the completion commits all the same): the pipeline goes on from that job.

``self.otherwise(task, ...)`` declares a **fail-soft** successor: created with the write
that fails the step after it exhausted its retries (never after ``Unrecoverable`` or an
error its task does not retry), instead of with a completion.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from .description import TaskDescription
from .enqueuer import NewJob
from .errors import InvalidPayload, TrackedError, Unrecoverable, mask_secrets
from .hooks import Hooks, Transition
from .jobs import Claim, JobStatus, NewRow, utcnow
from .keys import Then, then
from .messages import Control
from .newjobs import Ids, new_job
from .port import Platform
from .settings import Settings
from .store import JobStore

logger = logging.getLogger("celery_tracked")

#: Successors one step may declare (a runaway loop is refused, not inserted).
MAX_SUCCESSORS = 1000


class NotInAStep(TrackedError, RuntimeError):
    """``then``/``otherwise`` was called outside the body of a running tracked task."""


class InvalidSuccessor(InvalidPayload, Unrecoverable):
    """A successor the step declared was refused (not a tracked task, arguments its task
    refuses, too many successors): the step fails now, without retries (the same body
    would declare the same successor again)."""


@dataclass(frozen=True)
class Declared:
    """A successor declared by a running step: its job and how to publish it."""

    job: NewJob
    fail_soft: bool
    publish: Callable[[], None]
    key_round: int = 0


@dataclass
class Step:
    """The running attempt of a tracked job, as its successors see it."""

    job_id: str
    correlation_id: str
    declared: list[Declared] = field(default_factory=list)
    #: handed to the transaction that ends the step; published once it committed
    written: list[Declared] = field(default_factory=list)


_current: ContextVar[Step | None] = ContextVar("celery_tracked_step", default=None)
#: The successors waiting to be sent by the outermost publishing loop of this context.
_publishing: ContextVar[list[Declared] | None] = ContextVar(
    "celery_tracked_publishing", default=None
)


@contextmanager
def running(job_id: str, correlation_id: str | None) -> Iterator[Step]:
    """The body of job ``job_id`` runs inside: ``then``/``otherwise`` declare on it."""
    step = Step(job_id, correlation_id or job_id)
    token = _current.set(step)
    try:
        yield step
    finally:
        _current.reset(token)


def declare(
    task: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    idempotency_key: str | None = None,
    fail_soft: bool = False,
) -> str:
    """Declare a successor of the running step: a call of ``task`` (a tracked task: its
    ``description``, and its tracker's :class:`Successors`); returns the job id it will
    have (unless its key is taken by another job when the step completes).

    Raises:
        NotInAStep: no tracked task is running here.
        InvalidPayload: the successor's arguments were refused.
    """
    step = _current.get()
    if step is None:
        raise NotInAStep("then()/otherwise() can only be called from a running tracked task")
    if len(step.declared) >= MAX_SUCCESSORS:
        raise InvalidSuccessor(f"a step may declare at most {MAX_SUCCESSORS} successors")
    description = getattr(task, "description", None)
    if not isinstance(description, TaskDescription):
        raise InvalidSuccessor(f"a successor must be a tracked task, not {task!r}")
    maker: Successors = task.tracker.successors
    control = Control(idempotency_key, step.correlation_id, step.job_id)
    options: dict[str, Any] = {}
    job_id = str(uuid.uuid4())
    ids = Ids(job_id, job_id, False, step.job_id, step.correlation_id)
    try:
        job = new_job(description, maker.settings, args, kwargs, control, options, ids)
    except (InvalidPayload, TypeError) as exc:
        raise InvalidSuccessor(f"successor {description.name} refused: {exc}") from None
    if job.call.key is None:
        job = replace(job, call=replace(job.call, key=derived_key(step.job_id, job)))
    publish = maker.publisher(description, job, args, kwargs, options)
    step.declared.append(Declared(job, fail_soft, publish, maker.key_round(job)))
    return job.job_id


def successor_note(step_id: str) -> str:
    """The message of a successor's ``enqueued`` event."""
    return f"successor of job {step_id}: created when it completed"


def fail_soft_note(step_id: str) -> str:
    """The message of a fail-soft successor's ``enqueued`` event: how ``Tracker.retry``
    knows that the step's failure was followed already (``resend.py``)."""
    return f"fail-soft successor of job {step_id}: created when it failed after its retries"


def derived_key(parent_job_id: str, job: NewJob) -> str:
    """The key of a successor that has none: the step, the successor's job type and its
    (redacted) arguments."""
    digest = hashlib.sha256(f"{job.job_type}\n{job.call.payload_json}".encode()).hexdigest()
    return f"then:{parent_job_id}:{digest[:24]}"


class Successors(Hooks):
    """Inserts a step's successors with its completion (or its exhausted failure), then
    publishes them once that write committed (through the platform port: ``port.py``)."""

    def __init__(self, store: JobStore, settings: Settings, platform: Platform) -> None:
        self.store = store
        self.settings = settings
        self.platform = platform

    def key_round(self, job: NewJob) -> int:
        """The round a successor's row takes: 0, or under a key lifetime that frees keys
        the round after the key's newest job once that one let it go (read now; a producer
        that takes the same round first wins at the completion, and this successor is not
        created)."""
        if not job.rule.reused or job.call.key is None:
            return 0
        latest = self.store.find_by_key(job.job_type, job.call.key)
        if latest is None:
            return 0
        free = then(job.rule, latest, utcnow()) is Then.NEW_ROUND
        return latest.key_round + 1 if free else latest.key_round

    def publisher(
        self,
        task: TaskDescription,
        job: NewJob,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: Mapping[str, Any],
    ) -> Callable[[], None]:
        """Sends ``job``'s message (a re-publish of an existing job: no new row)."""
        message = {
            **options,
            "task_id": job.celery_task_id or job.job_id,
            "headers": job.headers().to_headers(),
            "argsrepr": job.call.argsrepr,
            "kwargsrepr": job.call.kwargsrepr,
        }
        return partial(self.platform.publish, task, tuple(args), dict(kwargs), message)

    def completion_rows(self, claim: Claim, result: Any) -> Sequence[NewRow]:
        return self._rows(claim, fail_soft=False)

    def failure_rows(self, claim: Claim, error: BaseException) -> Sequence[NewRow]:
        return self._rows(claim, fail_soft=True)

    def _rows(self, claim: Claim, fail_soft: bool) -> Sequence[NewRow]:
        step = _current.get()
        if step is None or step.job_id != claim.job_id:
            return ()
        step.written = [d for d in step.declared if d.fail_soft is fail_soft]
        note = (fail_soft_note if fail_soft else successor_note)(claim.job_id)
        return [
            NewRow("background_jobs", d.job.row(d.key_round), new_job=True, message=note)
            for d in step.written
        ]

    def after_transition(self, transition: Transition) -> None:
        step = _current.get()
        if step is None or step.job_id != transition.job_id:
            return
        if transition.event not in ("completed", "failed") or not step.written:
            return
        written, step.written = step.written, []
        queue = _publishing.get()
        if queue is not None:  # inside an eager successor's run: the outer loop sends them
            queue.extend(written)
            return
        queue = list(written)
        token = _publishing.set(queue)
        try:  # a loop, not a recursion: an eager pipeline of any length runs inline
            while queue:
                self._publish(queue.pop(0))
        finally:
            _publishing.reset(token)

    def _publish(self, declared: Declared) -> None:
        job_id = declared.job.job_id
        try:
            if self.store.get(job_id) is None:
                logger.info(
                    "successor %s of %s not created: key %s is another job's",
                    job_id,
                    declared.job.parent_job_id,
                    declared.job.call.key,
                )
                return
            declared.publish()
            self.store.handed_over(job_id, utcnow(), 0)
        except Exception as exc:
            detail = mask_secrets(str(exc), declared.job.call.secrets)
            if self._ran(job_id):  # eager: it ran here, and its body raised
                logger.info("successor %s ran here and raised: %s", job_id, detail)
                return
            logger.warning(
                "successor %s not published now (%s): the relay will publish it", job_id, detail
            )

    def _ran(self, job_id: str) -> bool:
        try:
            job = self.store.get(job_id)
        except Exception:
            return False
        return job is not None and job.status is not JobStatus.PENDING
