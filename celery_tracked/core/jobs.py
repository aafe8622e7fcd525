"""Value objects: statuses, jobs, events, claims, enqueue results, and the clock."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from types import GenericAlias
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from .decoding import decode


class JobStatus(str, enum.Enum):
    """The lifecycle of a tracked job.

    pending → processing | cancelled; processing → completed | retrying | failed
    (or processing again when a new attempt takes over an expired lease);
    retrying → processing | cancelled; failed | cancelled → pending (only via retry).
    """

    PENDING = "pending"
    PROCESSING = "processing"
    RETRYING = "retrying"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


class Event(str, enum.Enum):
    """What happened to a job: the ``event`` of a ``Transition`` given to the hooks and,
    under the same strings, of a row of ``background_job_events``.

    Transitions only: ``deduplicated``, ``debounced``, ``processing``, ``retrying``,
    ``cancel_requested``, ``skipped``, ``busy``, ``lease_lost``, ``error`` (their status is
    the delivery's fate for the last four). Stored only: ``started``, ``redelivered``,
    ``relayed``, ``slot_handed``, ``given_back``, ``retry_undone``, ``log``, ``missing``,
    ``found``, ``action``; both:
    ``paused``.
    """

    # an enqueue
    ENQUEUED = "enqueued"
    DEDUPLICATED = "deduplicated"
    DEBOUNCED = "debounced"
    ERROR = "error"  # also a run's write that failed
    # a delivery
    RELAYED = "relayed"
    #: the scheduler pass published a held job as it came due (``schedule.py``)
    SCHEDULED = "scheduled"
    #: a freed concurrency slot was handed to the waiting job (``handoff.py``)
    SLOT_HANDED = "slot_handed"
    STARTED = "started"
    REDELIVERED = "redelivered"
    PROCESSING = "processing"
    # a delivery that runs nothing
    SKIPPED = "skipped"
    BUSY = "busy"
    LEASE_LOST = "lease_lost"
    GIVEN_BACK = "given_back"
    #: a delivery of a paused queue or job type, its row held in the database
    PAUSED = "paused"
    #: a delivery of a task whose circuit is open, its row held in the database, and the
    #: held job a half-open circuit's pass published as its probe (``circuits.py``)
    CIRCUIT_OPEN = "circuit_open"
    CIRCUIT_PROBE = "circuit_probe"
    # an attempt's end
    COMPLETED = "completed"
    RETRYING = "retrying"
    FAILED = "failed"
    LOG = "log"  # a line logged by the body
    # operations
    CANCEL_REQUESTED = "cancel_requested"
    CANCELLED = "cancelled"
    RESCUED = "rescued"
    #: the reaper found the job's message nowhere (rescued only if a later pass confirms
    #: it), and found it again
    MISSING = "missing"
    FOUND = "found"
    RETRIED = "retried"
    RETRY_UNDONE = "retry_undone"
    #: an action done by hand (the dashboard's), naming its actor (``core/actions.py``)
    ACTION = "action"

    __str__ = JobStatus.__str__  # the value, as a status


#: The return type of a task's body, carried by ``EnqueueResult`` (type checkers only).
Result_co = TypeVar("Result_co", covariant=True)

TERMINAL = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED})
#: The statuses a delivery may claim.
CLAIMABLE = (JobStatus.PENDING, JobStatus.RETRYING)
#: A delivery claims a waiting row up to this long before its due time (``not_before``):
#: the message's eta is kept on the worker's clock, and the row's due time is written a
#: moment later on the database's (a body's own ``self.retry`` publishes before its
#: attempt's ``retrying`` is written), so a delivery on time finds it due, not held once more.
CLAIM_EARLY_S = 0.25


def utcnow() -> datetime:
    """The one clock of every timestamp celery-tracked writes (aware, UTC)."""
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Claim:
    """A run's hold on a job: the attempt number is the fence for its outcome."""

    job_id: str
    attempt: int
    max_attempts: int
    takeover: bool = False


@dataclass(frozen=True)
class NewRow:
    """A row to insert inside a completion transaction (``table`` is one of the library's
    own tables). It exists if and only if the job is marked completed.

    ``new_job``: a pending ``background_jobs`` row (a pipeline's successor), inserted
    unless its id or idempotency key is taken (then nothing is inserted, and the
    completion still commits), with its ``enqueued`` event when it is (``message``: that
    event's message).
    """

    table: str
    values: Mapping[str, Any]
    new_job: bool = False
    message: str | None = None

    def __post_init__(self) -> None:
        if self.table not in TABLES:
            raise ValueError(f"not a celery-tracked table: {self.table!r} (one of {TABLES})")
        if self.new_job and self.table != TABLES[0]:
            raise ValueError(f"a new job is a row of {TABLES[0]}, not {self.table}")


#: Columns of a new job row, in the order the producer gives them.
NEW_JOB_COLUMNS: tuple[str, ...] = (
    "id",
    "queue_name",
    "job_type",
    "task_name",
    "celery_task_id",
    "status",
    "payload_json",
    "attempts_made",
    "max_attempts",
    "idempotency_key",
    "key_round",
    "revision",
    "retries_exhausted",
    "correlation_id",
    "parent_job_id",
    "owner_id",
    "concurrency_key",
    "fairness_key",
    "tenant",
    "secrets_sealed",
    "progress",
    "priority",
    "created_at",
    "updated_at",
)
#: Values of a new job row the producer need not give.
NEW_JOB_DEFAULTS: Mapping[str, Any] = {
    "attempts_made": 0,
    "progress": 0,
    "key_round": 0,
    "revision": 0,
    "concurrency_key": None,
    "fairness_key": None,
    "tenant": None,
    "secrets_sealed": None,
    "retries_exhausted": False,
    "priority": None,
}
#: The library's own tables: the only ones a completion may add rows to.
TABLES = ("background_jobs", "background_job_events")


if TYPE_CHECKING:  # generic for type checkers only: a generic NamedTuple needs 3.11

    class EnqueueResult(NamedTuple, Generic[Result_co]):
        """What ``enqueue`` returns. ``created`` is False for a deduplicated call (True for a
        new job, or a new round of an ended job whose id was sent again)."""

        job_id: str
        status: JobStatus
        created: bool

else:

    class EnqueueResult(NamedTuple):
        """What ``enqueue`` returns. ``created`` is False for a deduplicated call (True for a
        new job, or a new round of an ended job whose id was sent again).

        ``EnqueueResult[R]``: ``R`` is the body's return type (``Tracker.wait`` returns it).
        """

        job_id: str
        status: JobStatus
        created: bool
        __class_getitem__ = classmethod(GenericAlias)


@dataclass(frozen=True)
class Job:
    """One ``background_jobs`` row. The repr shows neither payload nor result."""

    id: str
    queue_name: str
    job_type: str
    task_name: str
    celery_task_id: str | None
    status: JobStatus
    attempts_made: int
    max_attempts: int
    idempotency_key: str | None
    correlation_id: str | None
    parent_job_id: str | None
    owner_id: str | None
    progress: int
    stage: str | None
    worker: str | None
    error_type: str | None
    error_message: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    #: who holds the row, until when: a run's lease, or the relay's claim on a pending row
    locked_by: str | None = None
    locked_until: datetime | None = None
    #: when the message was handed to the broker (None: not yet; see the relay)
    published_at: datetime | None = None
    #: which of the jobs that held its idempotency key in turn this one is (0: the first)
    key_round: int = 0
    #: bumped when its message is replaced (debounce, ``Tracker.retry``)
    revision: int = 0
    #: the jobs sharing it are limited in how many run at once (``limits.py``)
    concurrency_key: str | None = None
    #: the jobs of its concurrency key take its slots in turn by it (``limits.py``)
    fairness_key: str | None = None
    #: failed after using up its retries (else stopped: ``Unrecoverable``, not retried)
    retries_exhausted: bool = False
    #: ``Tracker.cancel(running=True)`` asked its run to stop (it ends ``cancelled``)
    cancel_requested_at: datetime | None = None
    #: when the job is due: a pending one's countdown/eta, a retrying one's backoff (None: now)
    not_before: datetime | None = None
    #: its message's priority (Celery's ``priority``), kept by every re-publish; None: the
    #: broker's default
    priority: int | None = None
    #: a waiting job not started by then ends ``cancelled`` (``DeadlineExceeded``)
    deadline_at: datetime | None = None
    #: its tenant (the task's ``tenant=`` option, ``tenants.py``); None: none declared
    tenant: str | None = None
    payload_json: str | None = field(default=None, repr=False)
    #: the values under redacted names, encrypted (``tracked_secret_key``; never shown)
    secrets_sealed: str | None = field(default=None, repr=False)
    result_json: str | None = field(default=None, repr=False)

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Job:
        return _from_row(cls, row)

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    @property
    def result(self) -> Any:
        """The decoded ``result_json`` (None before completion), with Celery's JSON types
        (``datetime``, ``Decimal``, ``UUID``...: :mod:`celery_tracked.codec`)."""
        return None if self.result_json is None else decode(self.result_json)

    @property
    def payload(self) -> Any:
        """The decoded, redacted ``payload_json``: ``{"args": [...], "kwargs": {...}}``,
        with Celery's JSON types (:mod:`celery_tracked.codec`)."""
        return None if self.payload_json is None else decode(self.payload_json)

    @property
    def due_at(self) -> datetime | None:
        """When the job is due (UTC): a pending job's ``countdown``/``eta`` or debounce
        delay, a retrying one's backoff; None: at once. The public name of its column,
        ``not_before`` (the same value; ``tracked show --json`` and the ``due_after``/
        ``due_before`` filters say ``due`` too)."""
        return self.not_before

    @property
    def duration_ms(self) -> int | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return int((self.finished_at - self.started_at).total_seconds() * 1000)


@dataclass(frozen=True)
class JobEvent:
    """One ``background_job_events`` row: a step of the job's history."""

    id: int
    job_id: str
    event: str
    status: JobStatus
    attempt: int
    message: str | None
    duration_ms: int | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> JobEvent:
        return _from_row(cls, row)


R = TypeVar("R", Job, JobEvent)


def _from_row(cls: type[R], row: Mapping[Any, Any]) -> R:
    """A value object from a row (its ``status`` as a :class:`JobStatus`)."""
    values = {f.name: row[f.name] for f in fields(cls)}
    values["status"] = JobStatus(values["status"])
    return cls(**values)


#: The event of an undone ``Tracker.retry`` (its status is the one the job went back to).
RETRY_UNDONE = "retry_undone"
#: The keyset cursor of a cleanup's first batch: before every row.
PURGE_START = (datetime(1970, 1, 1, tzinfo=timezone.utc), "")


@dataclass(frozen=True)
class Removed:
    """A row a cleanup batch removed: what its Redis guard entry is named by."""

    id: str
    job_type: str
    idempotency_key: str | None
    created_at: datetime


@dataclass(frozen=True)
class Batch:
    """What one cleanup batch did: the rows it removed, their events, and the cursor of the
    next batch (None: the sweep is done)."""

    removed: tuple[Removed, ...]
    events: int
    cursor: tuple[datetime, str] | None
