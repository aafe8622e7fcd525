"""Every public exception of celery-tracked; this module imports nothing of the package
(but, for a type, the values of ``jobs``, which import nothing either).

Every exception celery-tracked raises derives from :class:`TrackedError`, so callers
never catch ``psycopg``, ``sqlalchemy`` or ``redis`` exceptions::

    TrackedError
    ├── ConfigurationError        a setting is missing or invalid (names the setting)
    │   └── InvalidTaskOption     a task's tracked option is invalid (at decoration)
    ├── InvalidPayload            bad input at enqueue; nothing was created
    │   ├── ArgumentsMismatch     the arguments do not fit the body (also a TypeError)
    │   ├── PayloadNotSerializable
    │   ├── PayloadTooLarge
    │   ├── MissingRequired       a call without an argument the task requires (``required=``)
    │   ├── InvalidSuccessor      a successor a step declared was refused (also Unrecoverable)
    │   └── InvalidPriority       a priority that is not an int its queue's broker carries
    ├── EnqueueError              Redis, database or broker failed at enqueue (retryable)
    │   ├── DuplicateInCanvas     a canvas member's idempotency key is taken (not retryable)
    │   ├── NotInTrackingDatabase ``enqueue_in`` given another database's connection
    │   ├── NotTransactional      ``enqueue_in`` cannot decide this call in a transaction
    │   └── TaskIdInUse           the given ``task_id`` is a job of another task
    ├── RetryRefused              ``Tracker.retry`` cannot re-run the job as asked
    ├── DeadlineExceeded          (an ``error_type``) a job cancelled, not started by its deadline
    ├── StoreError                the tracking database failed outside enqueue
    │   ├── Disconnected          (internal) its pooled connection was dead
    │   ├── Refused               (internal) a constraint or a column refused a value
    │   └── TransactionFailed     the body's ``self.transaction()`` failed before its commit
    ├── GuardError                Redis (the idempotency guard) failed
    ├── JobNotFound
    ├── UnknownTask               ``Tracker.enqueue(name)``: no tracked task of that name here
    ├── InvalidFilter             ``Tracker.jobs``/bulk actions: a bad filter, limit or cursor
    ├── InvalidPause              ``Tracker.pause``/``resume``: not one scope, or an unknown
    │                             queue or job type (nothing was written)
    ├── InvalidCircuit            ``Tracker.open_circuit``/``close_circuit``: an unknown
    │                             circuit, a bad reason (nothing was written)
    ├── InvalidProgress           ``set_progress``/``log`` given a value it cannot record
    ├── NotInAStep                ``then``/``otherwise``/``transaction`` outside a running
    │                             tracked task
    ├── WaitTimeout               (also a ``TimeoutError``)
    ├── JobFailed                 ``Tracker.wait`` on a failed or cancelled job
    └── Unrecoverable             raised by a task body: fail now, no further attempts
        └── InvalidSuccessor

Safe error text (masking, summaries) lives in :mod:`celery_tracked.redact`.

Internal, never raised to users: ``DuplicateJob`` (a store's insert met the job's id or
idempotency key; the enqueuer turns it into a duplicate result), ``PublishRefused`` (the
enqueuer raises the error it carries).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .jobs import Job  # a pure leaf (values only): no circle


class TrackedError(Exception):
    """Root of every exception raised by celery-tracked."""


class ConfigurationError(TrackedError):
    """A setting is missing or invalid.

    Attributes:
        setting: the ``app.conf`` name of the offending setting.
    """

    def __init__(self, setting: str, reason: str) -> None:
        self.setting = setting
        self.reason = reason
        super().__init__(f"{setting}: {reason}")


class InvalidTaskOption(ConfigurationError, ValueError):
    """A tracked option of a task (``max_attempts``, ``backoff_ms``, ``job_type``,
    ``tracked_queue``/``queue``, ``idempotency_key``, ``validator``) is invalid: raised
    when the task is declared. ``setting`` names the option."""


class InvalidPayload(TrackedError, ValueError):
    """The task arguments were refused before anything was created."""


class ArgumentsMismatch(InvalidPayload, TypeError):
    """The arguments do not fit the task body's signature (missing, extra or repeated):
    a ``TypeError``, as Celery raises for it, unless the task says ``typing=False``."""


class PayloadNotSerializable(InvalidPayload, TypeError):
    """The arguments cannot be encoded as JSON."""


class PayloadTooLarge(InvalidPayload):
    """The JSON-encoded arguments exceed ``tracked_max_payload_bytes``."""


class MissingRequired(InvalidPayload):
    """A call without an argument its task's ``required=`` names (seed 004's rule); nothing
    was created. ``missing``: the names (never a value)."""

    def __init__(self, task_name: str, missing: tuple[str, ...]) -> None:
        self.task_name = task_name
        self.missing = missing
        names = ", ".join(missing)
        super().__init__(
            f"{task_name}: the call must give {names} (required=); nothing was created"
        )


class EnqueueError(TrackedError):
    """Redis, the database or the broker failed during enqueue.

    Retryable: nothing was left behind (no row, no message, no guard key).
    """

    retryable = True


class DuplicateInCanvas(EnqueueError):
    """A signature sent as part of a canvas (``group``, ``chain``, ``chord``, a ``link``, a
    ``self.replace``) has the idempotency key of an existing job, or the task id of a job
    still active (the task id of a job that ended runs that job again: a new round).

    Outside a canvas such a call returns the existing job; inside one, Celery waits on the
    signature's own frozen task id, which would never get a message: the canvas would hang.
    Raised before this signature is published; members of a group or chord header sent
    before it were enqueued and run. Not retryable: the key stays taken.

    Attributes:
        job_id: the existing job holding the key.
        task_id: the frozen task id Celery gave the signature.
    """

    retryable = False

    def __init__(self, task_name: str, job_id: str, task_id: str) -> None:
        self.job_id = job_id
        self.task_id = task_id
        super().__init__(
            f"{task_name}: idempotency key already used by job {job_id}; inside a canvas "
            f"its signature (task id {task_id}) would never run, refused"
        )


class TaskIdInUse(EnqueueError, ValueError):
    """The ``task_id`` given to a call is the id of a job of another task: refused, nothing
    created (the other task's job is never returned as this call's). Not retryable.

    Attributes:
        job_id: the existing job (of ``task_name``).
        task_id: the ``task_id`` given.
        task_name: the existing job's task.
    """

    retryable = False

    def __init__(self, called: str, task_name: str, job_id: str, task_id: str) -> None:
        self.job_id, self.task_id, self.task_name = job_id, task_id, task_name
        super().__init__(
            f"{called}: task_id {task_id} is already the id of job {job_id} of another "
            f"task, {task_name}; give a new task_id (or none), refused"
        )


class NotInTrackingDatabase(EnqueueError, ValueError):
    """``enqueue_in`` was given a connection or session of another database than the
    tracking database (``tracked_database_url``): the job's row could not share its
    transaction. Nothing was written."""

    retryable = False


class NotTransactional(EnqueueError, ValueError):
    """``enqueue_in`` cannot honour this call inside a caller's transaction: a key
    lifetime other than the default (``ended``, a throttle, a debounce), eager mode, or a
    store without SQL (the memory store). Nothing was written."""

    retryable = False


class RetryRefused(TrackedError, ValueError):
    """``Tracker.retry`` cannot re-run this job as asked (nothing was changed): its stored
    arguments hold redacted values not passed again, values were given for arguments that
    were not redacted, or a newer job holds its idempotency key."""


class DeadlineExceeded(TrackedError):
    """The ``error_type`` of a job that was not started by its deadline (``deadline=``,
    ``_deadline=``): it ended ``cancelled`` without running. Never raised by the library:
    its name is recorded on the row (``Job.error_type``) and ``Tracker.wait`` raises
    ``JobFailed`` for such a job."""


class StoreError(TrackedError):
    """The tracking database failed."""


class GuardError(TrackedError):
    """Redis failed (credentials masked)."""


class Disconnected(StoreError):
    """The statement failed because its pooled connection was dead (now discarded)."""

    internal = True  # recorded as a StoreError


class Refused(StoreError):
    """The database refused a row for what it holds (a constraint), not for being down:
    sending it again cannot help."""

    internal = True  # recorded as a StoreError


class TransactionFailed(StoreError):
    """The body's own transaction (``self.transaction()``) failed before its completion
    committed (the server ended it, or a statement of the body aborted it): nothing of it
    remains, and the attempt fails like a body that raised (it counts against
    ``max_attempts``)."""


class DuplicateJob(Exception):
    """Internal: the insert hit the unique key or the primary key."""


class PublishRefused(Exception):
    """Internal: a ``publish`` whose framework refused the call itself (Celery's own
    ``ValueError`` of a bad time limit...), not a broker failure: the enqueuer undoes the
    enqueue and raises ``error`` as it is, never a retryable ``EnqueueError``."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class InvalidProgress(TrackedError, ValueError):
    """``set_progress`` got a percent that is not a number from 0 to 100 (a bool, NaN), or
    a stage that is not a string of at most 200 characters without NUL; or ``log`` got an
    unknown level. Raised in the body, also outside a tracked run."""


class JobNotFound(TrackedError, LookupError):
    """No job has this id."""


class UnknownTask(TrackedError, LookupError):
    """``Tracker.enqueue(name, ...)`` (``celery tracked call``) names no tracked task
    registered in this process: its module was never imported here, or the task is a
    plain Celery one. Nothing was created. Its name is also the ``error_type`` of a job
    cancelled because a worker received its message without having its task registered
    (never raised then: the job ends ``cancelled``).

    Attributes:
        task_name: the name given.
    """

    def __init__(self, task_name: str, reason: str) -> None:
        self.task_name = task_name
        super().__init__(f"{task_name!r}: {reason}")


class InvalidFilter(TrackedError, ValueError):
    """``Tracker.jobs``, ``retry_many`` or ``cancel_many`` got a filter it cannot apply (an
    unknown status, a naive datetime, an empty range, a bad limit) or a cursor it did not
    make; or a maintenance pass (``relay``, ``schedule``, ``reap``, ``cleanup``,
    ``probe``, ``run_maintenance``) a ``now=`` that is not an aware datetime. Nothing was read or
    changed."""


class WaitTimeout(TrackedError, TimeoutError):
    """``Tracker.wait`` gave up before the job reached a terminal status."""


class JobFailed(TrackedError):
    """The awaited job ended ``failed`` or ``cancelled``.

    Attributes:
        job: the job as it was read when the wait ended.
    """

    def __init__(self, job: Job) -> None:
        self.job = job
        detail = f"{job.error_type}: {job.error_message}" if job.error_type else job.status
        super().__init__(f"job {job.id} {job.status}: {detail}")


class Unrecoverable(TrackedError):
    """Raise from a task body to fail the job now, whatever attempts remain."""


class NotInAStep(TrackedError, RuntimeError):
    """``then``/``otherwise`` was called outside the body of a running tracked task."""


class InvalidSuccessor(InvalidPayload, Unrecoverable):
    """A successor the step declared was refused (not a tracked task, arguments its task
    refuses, too many successors): the step fails now, without retries (the same body
    would declare the same successor again)."""


class InvalidPriority(InvalidPayload):
    """A job's priority (the call's ``priority=``, else its task's) is not an int the
    app's broker carries on its queue: not an int (a bool, a float, a string), negative,
    above 255 (one byte, any broker), or above what the queue takes: 0-9 on Redis and the
    other kombu virtual transports (the highest of ``priority_steps`` when set), 0-255 on
    RabbitMQ, or the queue's ``x-max-priority`` (its ``queue_arguments`` in
    ``task_queues``, else ``task_queue_max_priority``). Every bad priority given at enqueue
    raises it, before anything is created. (A task's own ``priority`` outside 0-255 is
    refused when the task is declared: ``InvalidTaskOption``, as every task option.)

    Attributes:
        priority: the value given; highest: the highest allowed; queue: the job's queue
        (None: refused before its queue was known, for any queue).
    """

    def __init__(self, priority: Any, highest: int, queue: str | None = None) -> None:
        self.priority, self.highest, self.queue = priority, highest, queue
        if isinstance(priority, bool) or not isinstance(priority, int):
            text = (
                f"priority must be an int from 0 to {highest}, got "
                f"{type(priority).__name__} {priority!r}"
            )
        elif queue is None:
            text = f"priority {priority} is out of range: a message priority is 0 to {highest}"
        else:
            text = (
                f"priority {priority} is out of range for queue {queue!r}: its broker takes "
                f"0 to {highest}"
            )
        super().__init__(text)


class InvalidPause(TrackedError, ValueError):
    """``Tracker.pause``/``resume`` was not given exactly one scope (``queue=``,
    ``job_type=``, ``everything=True``), or named a queue or job type the app does not
    know. Nothing was written."""


class InvalidCircuit(TrackedError, ValueError):
    """``Tracker.open_circuit``/``close_circuit``: a circuit no tracked task names (and no
    row), or a bad ``reason``/``by``; nothing was written."""
