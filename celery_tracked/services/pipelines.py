"""Self-chaining pipelines: a running step declares its successors (``self.then``).

A successor is a job like any other, declared from inside a tracked task's body and
created **with the step's completion**: its row (``pending``, not yet published) is
inserted by the :class:`Successors` hook in the very transaction that marks the step
``completed``, and its message is published only after that commit. So a successor exists
if and only if its step completed, and a step that runs again (a redelivery, a retry after
a crash, a lost completion write) never creates a second one: only one completion of a job
is ever written. A process that dies between the commit and the publish leaves the row to
the relay (``relay.py``), which publishes it after ``tracked_relay_grace_seconds``.

A successor inherits the step's ``correlation_id`` and ``owner_id`` and gets
``parent_job_id`` = the step;
its idempotency key is the one its task builds (its template, or a key given with
``self.successor(task, idempotency_key=...)``), else a deterministic one from the step,
the successor's job type and its arguments. A successor whose key another job holds is not
created (the completion commits all the same): the pipeline goes on from that job.

``self.otherwise(task, ...)`` declares a **fail-soft** successor: created with the write
that fails the step after it exhausted its retries (never after ``Unrecoverable`` or an
error its task does not retry), instead of with a completion.

The step is the running attempt's: the :class:`Successors` hook attaches a :class:`Step` to
each attempt (``Hooks.running``), the adapter passes it to :func:`declare`, and the hook
reads it from the attempt it is given; no context variable carries it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from ..core.attempt import Attempt
from ..core.description import TaskDescription
from ..core.errors import InvalidPayload
from ..core.errors import InvalidSuccessor as InvalidSuccessor  # re-exported (home: errors.py)
from ..core.errors import NotInAStep as NotInAStep  # re-exported (home: errors.py)
from ..core.hooks import Hooks
from ..core.jobs import JobStatus, NewRow, utcnow
from ..core.keys import Then, then
from ..core.messages import Control
from ..core.platform import Platform
from ..core.ports import SuccessorStore
from ..core.printable import visible
from ..core.redact import mask_secrets
from ..core.settings import Settings
from .producer import CallFacts, Message, NewJob, new_job

logger = logging.getLogger("celery_tracked")

#: Successors one step may declare (a runaway loop is refused, not inserted).
MAX_SUCCESSORS = 1000


@dataclass(frozen=True)
class Declared:
    """A successor declared by a running step: its job and how to publish it."""

    job: NewJob
    fail_soft: bool
    publish: Callable[[], object]
    key_round: int = 0
    #: the database's clock minus this process's, read at declaration under a timed key
    #: rule (``KeyRule.timed``): its row is created on the database's clock
    db_ahead: timedelta | None = None


@dataclass
class Step:
    """The running attempt of a tracked job, as its successors see it."""

    job_id: str
    correlation_id: str
    declared: list[Declared] = field(default_factory=list)
    #: handed to the transaction that ends the step; published once it committed
    written: list[Declared] = field(default_factory=list)
    #: the step's ``owner_id``, which its successors carry (read at the first declaration)
    owner_id: str | None = None
    owner_read: bool = False


def declare(
    step: Step | None,
    task: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    idempotency_key: str | None = None,
    fail_soft: bool = False,
) -> str:
    """Declare a successor of the running ``step`` (None: no tracked task runs here): a
    call of ``task`` (a tracked task: its ``description``, and its tracker's
    :class:`Successors`); returns the job id it will have (unless its key is taken by
    another job when the step completes).

    Raises:
        NotInAStep: no tracked task is running here.
        InvalidPayload: the successor's arguments were refused.
    """
    if step is None:
        raise NotInAStep("then()/otherwise() can only be called from a running tracked task")
    if len(step.declared) >= MAX_SUCCESSORS:
        raise InvalidSuccessor(f"a step may declare at most {MAX_SUCCESSORS} successors")
    description = getattr(task, "description", None)
    if not isinstance(description, TaskDescription):
        raise InvalidSuccessor(f"a successor must be a tracked task, not {task!r}")
    maker: Successors = task.tracker.celery_side.successors
    if not step.owner_read:  # one read per step, only when it declares a successor
        row = maker.store.get(step.job_id)
        step.owner_id, step.owner_read = (None if row is None else row.owner_id), True
    control = Control(idempotency_key, step.correlation_id, step.job_id, step.owner_id)
    options: dict[str, Any] = {}
    job_id = str(uuid.uuid4())
    facts = CallFacts(job_id, job_id, False, step.job_id, step.correlation_id, control, options)
    try:
        job = new_job(description, maker.settings, facts, args, kwargs)
    except (InvalidPayload, TypeError) as exc:
        raise InvalidSuccessor(f"successor {description.name} refused: {exc}") from None
    if job.call.key is None:
        job = replace(job, call=replace(job.call, key=derived_key(step.job_id, job)))
    publish = maker.publisher(description, job, args, kwargs, options)
    ahead = maker.store.clock() - utcnow() if job.rule.timed else None
    now = None if ahead is None else utcnow() + ahead
    step.declared.append(Declared(job, fail_soft, publish, maker.key_round(job, now), ahead))
    return job.job_id


def successor_note(step_id: str) -> str:
    """The message of a successor's ``enqueued`` event."""
    return f"successor of job {step_id}: created when it completed"


def fail_soft_note(step_id: str) -> str:
    """The message of a fail-soft successor's ``enqueued`` event: how ``Tracker.retry``
    knows that the step's failure was followed already (``rerun.py``)."""
    return f"fail-soft successor of job {step_id}: created when it failed after its retries"


def derived_key(parent_job_id: str, job: NewJob) -> str:
    """The key of a successor that has none: the step, the successor's job type and its
    (redacted) arguments."""
    digest = hashlib.sha256(f"{job.job_type}\n{job.call.payload_json}".encode()).hexdigest()
    return f"then:{parent_job_id}:{digest[:24]}"


class Successors(Hooks):
    """Inserts a step's successors with its completion (or its exhausted failure), then
    publishes them once that write committed (through the platform port: ``platform.py``)."""

    def __init__(self, store: SuccessorStore, settings: Settings, platform: Platform) -> None:
        self.store = store
        self.settings = settings
        self.platform = platform
        #: inline runs (eager mode) of successors being published, by job id: the queue of
        #: the publishing loop their own successors join (a loop, not a recursion)
        self._loops: dict[str, list[Declared]] = {}
        self._lock = threading.Lock()

    def key_round(self, job: NewJob, now: datetime | None = None) -> int:
        """The round a successor's row takes: 0, or under a key lifetime that frees keys
        the round after the key's newest job once that one let it go (read now; a producer
        that takes the same round first wins at the completion, and this successor is not
        created). ``now``: the database's clock, for a key rule that compares times."""
        if not job.rule.reused or job.call.key is None:
            return 0
        latest = self.store.find_by_key(job.job_type, job.call.key)
        if latest is None:
            return 0
        free = then(job.rule, latest, now or utcnow()) is Then.NEW_ROUND
        return latest.key_round + 1 if free else latest.key_round

    def publisher(
        self,
        task: TaskDescription,
        job: NewJob,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: Mapping[str, Any],
    ) -> Callable[[], object]:
        """Sends ``job``'s message (a re-publish of an existing job: no new row), made as
        the producer makes it (``producer.Message``)."""
        send = partial(self.platform.publish, task)
        message = Message(send, tuple(args), dict(kwargs), job.call, dict(options))
        return partial(message, job.headers(), job.celery_task_id or job.job_id)

    @contextmanager
    def running(self, attempt: Attempt) -> Iterator[Step]:
        """The attempt's step, on which its body declares (``self.then``...)."""
        step = Step(attempt.job_id, attempt.run.headers.correlation_id or attempt.job_id)
        attempt.attach(step)
        yield step

    def completion_rows(self, attempt: Attempt, result: Any) -> Sequence[NewRow]:
        return self._rows(attempt, fail_soft=False)

    def failure_rows(self, attempt: Attempt, error: BaseException) -> Sequence[NewRow]:
        return self._rows(attempt, fail_soft=True)

    def _rows(self, attempt: Attempt, fail_soft: bool) -> Sequence[NewRow]:
        step = attempt.part(Step)
        if step is None:
            return ()
        step.written = [d for d in step.declared if d.fail_soft is fail_soft]
        note = (fail_soft_note if fail_soft else successor_note)(attempt.job_id)
        return [
            NewRow("background_jobs", d.job.row(d.key_round, _at(d)), new_job=True, message=note)
            for d in step.written
        ]

    def after_attempt(self, attempt: Attempt) -> None:
        step = attempt.part(Step)
        if step is None or attempt.recorded not in ("completed", "failed") or not step.written:
            return
        written, step.written = step.written, []
        with self._lock:
            queue = self._loops.get(attempt.job_id)
            if queue is not None:  # an inline successor's run: the outer loop sends them
                queue.extend(written)
                return
        queue = list(written)
        while queue:
            declared = queue.pop(0)
            if not attempt.run.inline:
                self._publish(declared)
                continue
            job_id = declared.job.job_id
            with self._lock:
                self._loops[job_id] = queue
            try:
                self._publish(declared)
            finally:
                with self._lock:
                    self._loops.pop(job_id, None)

    def _publish(self, declared: Declared) -> None:
        job_id = declared.job.job_id
        try:
            if self.store.get(job_id) is None:
                logger.info(
                    "successor %s of %s not created: key %s is another job's",
                    job_id,
                    declared.job.parent_job_id,
                    visible(declared.job.call.key or ""),
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


def _at(declared: Declared) -> datetime | None:
    """When a successor's row is created: on the database's clock under a timed key rule
    (this process's clock corrected by the difference read at its declaration)."""
    return None if declared.db_ahead is None else utcnow() + declared.db_ahead
