"""The store contract: what each service asks of the tracking database, as Protocols.

Pure: no SQLAlchemy, Redis or Celery here. Each service depends on the narrowest role it
uses; :class:`Store` combines them all, and is what ``Tracker`` wires. Two stores implement
it: the SQL store (``celery_tracked.store.JobStore``: PostgreSQL, SQLite, MariaDB) and the
in-memory one (``celery_tracked.memory.MemoryStore``); ``tests/contract`` runs one suite
against both.

The contract every implementation keeps:

- every move is conditional: it applies only from the statuses it names and under its
  fence (a run's claimed attempt, a lease that lapsed on the store's clock, the message
  revision the caller saw), atomically, and returns False (or None) when it did not;
- leases, backoffs and the relay's claims are judged on the store's one clock
  (:meth:`Reader.clock`), never on the caller's; the ``now`` a caller passes is for the
  record (``updated_at``, events);
- a move that names an event appends it to the job's history, in the same atomic step;
- ``(job_type, idempotency_key, key_round)`` is unique: ``insert`` raises
  :class:`~celery_tracked.errors.DuplicateJob` for it or for a taken id;
- a failure of the store itself is a :class:`~celery_tracked.errors.StoreError`
  (``Refused``: a value the store cannot hold; ``Disconnected``: already retried).

Roles (who calls them): :class:`EnqueueStore` (``Enqueuer``), :class:`RunStore` (``Runner``:
:class:`ClaimStore`, and :class:`OutcomeStore` for its ``OutcomeWriter`` and ``CarriedOver``),
:class:`ReportStore` (``Reporter``), :class:`LeaseStore` (``LeaseKeeper``), :class:`DeadRunStore`
(``TimeLimits``), :class:`RelayStore` (``Relay``), :class:`ScheduleStore` (``Scheduler``),
:class:`ReapingStore` (``Reaper``), :class:`CleanupStore` (``Cleanup``), :class:`SuccessorStore`
(``Successors``), :class:`RerunStore` (``Tracker.retry``, cancels), :class:`ReadStore` (reads,
bulk actions, statistics, metrics), :class:`PauseStore` (``Pauses``, the worker's gate; a
held delivery's move is ``ClaimStore.hold``), :class:`CircuitStore` (``Circuits``),
:class:`HandOffStore`, :class:`ActionStore`, ``MaintenanceStore`` (the plugins' passes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from .actions import ActionStore
from .circuits import CircuitMoves
from .cleanup import Boundary, Sweep
from .deadlines import Deadline
from .fences import (
    AttemptError,
    Completion,
    DeadRun,
    Lease,
    RetryUndo,
    Rows,
    StaleRun,
    StallCutoffs,
    Takeover,
)
from .finder import JobFilter, Position
from .jobs import Batch, Claim, Job, JobEvent
from .keys import UndoneReplace
from .maintenance import MaintenanceStore
from .pauses import PauseStore
from .throughput import ThroughputStore

__all__ = [
    "CancelStore",
    "CircuitStore",
    "ClaimStore",
    "CleanupStore",
    "DeadRunStore",
    "EnqueueStore",
    "LeaseStore",
    "OutcomeStore",
    "PauseStore",
    "ReadStore",
    "Reader",
    "ReapingStore",
    "RelayStore",
    "ReportStore",
    "RerunStore",
    "RunStore",
    "Store",
    "SuccessorStore",
]


class Reader(Protocol):
    """One job, and the store's clock (every role reads them)."""

    def get(self, job_id: str) -> Job | None:
        """The job, or None."""

    def clock(self) -> datetime:
        """The store's current time: the clock leases and backoffs are judged on."""


class Handing(Protocol):
    """The producer's mark after a publish (enqueue, successors, relay, reaper, retry)."""

    def handed_over(self, job_id: str, now: datetime, revision: int = 0) -> bool:
        """The message of ``revision`` was handed to the broker (once, if still current)."""

    def note_handed_over(self, job_id: str, now: datetime, revision: int = 0) -> None:
        """``handed_over``, without waiting for the answer where the store can (a lost
        mark only lets the relay send a harmless duplicate)."""


class KeyReader(Protocol):
    def find_by_key(self, job_type: str, key: str) -> Job | None:
        """The newest job (latest key round) holding ``(job_type, key)``."""


class EnqueueStore(Reader, Handing, KeyReader, Protocol):
    """The producer: insert, deduplicate, replace (a debounce), undo a failed publish."""

    def insert(self, row: Mapping[str, Any]) -> None:
        """A pending job and its ``enqueued`` event (raises ``DuplicateJob``)."""

    def undo(self, job_id: str) -> bool:
        """Remove a job (and its history) whose message nobody handed over."""

    def replace_arguments(
        self,
        job_id: str,
        *,
        seen_revision: int,
        payload_json: str,
        now: datetime,
        message: str,
        secrets_sealed: str | None = None,
        due_in_s: float | None = None,
        due_at: datetime | None = None,
    ) -> bool: ...

    def undo_replace(
        self, job_id: str, made: int, undo: UndoneReplace, *, now: datetime, message: str
    ) -> bool: ...


class EndsDeadRuns(Protocol):
    def end_dead_run(self, job_id: str, dead: DeadRun) -> bool:
        """processing → retrying | failed | cancelled for a run that died, fenced like a
        takeover."""


class Expires(Protocol):
    def expire(self, job_id: str, *, now: datetime, message: str) -> bool:
        """pending | retrying → cancelled (``DeadlineExceeded``) once its deadline came on
        the database's clock; False otherwise."""
        ...


class ClaimStore(Reader, EndsDeadRuns, Expires, Protocol):
    """A delivery's claim: claim, take over a lapsed lease, give a claim back."""

    def claim(self, job_id: str, lease: Lease) -> Claim | None: ...

    def take_over(self, job_id: str, lease: Lease, fence: Takeover) -> Claim | None: ...

    def fail_lost(self, job_id: str, fence: Takeover, now: datetime) -> bool: ...

    def key_busy(self, job_id: str, key: str, limit: int) -> bool: ...

    def key_waiting(self, key: str) -> int:
        """How many jobs of concurrency key ``key`` wait for a slot (pending, retrying)."""

    def give_back(
        self, claim: Claim, *, owner: str, claimed_at: datetime, now: datetime, message: str
    ) -> bool: ...

    def republished(self, job_id: str, revision: int, refresh_s: float) -> bool:
        """A postponed delivery of a waiting job handed its message to the broker again
        (recorded if the last record is older than ``refresh_s``)."""

    def hold(
        self, job_id: str, revision: int, *, now: datetime, message: str, circuit: str = ""
    ) -> bool:
        """A delivery a pause (or an open ``circuit``) holds: the waiting row (at
        ``revision``, nobody's) held in the database, no message (a new revision), a
        ``paused`` (``circuit_open``) event, no attempt used; the relay publishes it once
        nothing holds it."""


class OutcomeStore(Reader, Protocol):
    """How a run ends, fenced by its claim."""

    def complete(self, claim: Claim, done: Completion, resent: bool = False) -> bool: ...

    def retrying(self, claim: Claim, error: AttemptError, delay_ms: int) -> bool: ...

    def fail(
        self, claim: Claim, error: AttemptError, rows: Rows = (), retries_exhausted: bool = False
    ) -> bool: ...

    def cancel_run(self, claim: Claim, *, now: datetime, message: str) -> bool: ...

    def release(self, claim: Claim, now: datetime) -> bool: ...


class ReportStore(Protocol):
    """A running body's progress, log lines, and its cancel request."""

    def report_progress(
        self, claim: Claim, *, percent: int, stage: str | None, now: datetime
    ) -> bool: ...

    def log_line(self, claim: Claim, *, message: str, now: datetime) -> bool: ...

    def log_lines(self, job_id: str) -> int: ...

    def cancel_wanted(self, job_id: str) -> bool: ...


class LeaseStore(Protocol):
    def renew(self, claim: Claim, lease_seconds: float) -> bool: ...


class RunStore(ClaimStore, OutcomeStore, Protocol):
    """Everything a worker's ``Runner`` does with a delivery (its ``OutcomeWriter`` writes the
    outcome; the lease keeper renews, the ``Reports`` hook reports)."""


class DeadRunStore(Reader, EndsDeadRuns, Protocol):
    """The end of a run killed outside its call path (``TimeLimits``)."""

    def connect(self) -> None:
        """Open this process's connections now, in the calling thread."""


class RelayStore(Reader, Handing, Expires, Protocol):
    """The relay: unpublished pending rows, claimed and handed over."""

    def unpublished(self, *, cutoff: datetime, now: datetime) -> list[str]: ...

    def relay_claim(
        self,
        job_id: str,
        *,
        owner: str,
        now: datetime,
        lease_s: float,
        cutoff: datetime,
        moved_due: datetime | None = None,
    ) -> bool: ...

    def relayed(
        self, job_id: str, *, owner: str, now: datetime, message: str, revision: int = 0
    ) -> bool: ...


class ScheduleStore(RelayStore, Protocol):
    """The scheduler pass: held rows coming due, claimed (the relay's claim) and handed over."""

    def held_due(self, *, until: datetime, limit: int = 100) -> list[Job]: ...

    def scheduled(
        self, job_id: str, *, owner: str, now: datetime, message: str, revision: int = 0
    ) -> bool: ...


class ReapingStore(Reader, Handing, Protocol):
    """The reaper: stalled rows, rescued or abandoned."""

    def stalled(self, cutoffs: StallCutoffs, limit: int) -> list[tuple[Job, int]]: ...

    def missing_since(self, job_ids: Sequence[str]) -> dict[str, datetime]:
        """Of ``job_ids``, those whose latest event is the reaper's ``missing``: when."""

    def note(self, job: Job, event: str, message: str, now: datetime) -> None:
        """The reaper's ``missing``/``found`` event, while the row is as judged."""

    def rescue_run(self, job: Job, stale: StaleRun) -> bool: ...

    def abandon_run(self, job: Job, stale: StaleRun, retries_exhausted: bool) -> bool: ...

    def cancel_stalled_run(self, job: Job, stale: StaleRun) -> bool: ...

    def rescue_waiting(
        self, job: Job, *, cutoff: datetime, message: str, now: datetime
    ) -> bool: ...

    def abandon_waiting(
        self, job: Job, *, cutoff: datetime, message: str, now: datetime, retries_exhausted: bool
    ) -> bool: ...


class CleanupStore(Protocol):
    """The cleanup: ended rows removed in batches."""

    def clock(self) -> datetime: ...

    def purge_batch(self, sweep: Sweep, cursor: tuple[datetime, str], limit: int) -> Batch: ...

    def purge_count(self, sweep: Sweep) -> int: ...

    def keep_boundaries(self, keep: int) -> list[tuple[str, Boundary]]: ...


class SuccessorStore(Reader, Handing, KeyReader, Protocol):
    """A pipeline's successors (inserted with a completion; published after it)."""


class RerunStore(Reader, Handing, KeyReader, Protocol):
    """``Tracker.retry`` and the cancels."""

    def retry(
        self,
        job_id: str,
        *,
        seen_revision: int,
        budget: int,
        now: datetime,
        message: str,
        secrets_sealed: str | None = None,
        payload_json: str | None = None,
        completed_too: bool = False,
        due_in_s: float | None = None,
        due_at: datetime | None = None,
        deadline: Deadline | None = None,
    ) -> bool: ...

    def undo_retry(self, job_id: str, undo: RetryUndo, *, now: datetime, message: str) -> bool:
        """Back to the ended status ``undo`` restores, if nobody handed its revision over."""

    def retry_rounds(self, job_id: str) -> list[tuple[str, int]]: ...

    def fail_soft_successor(self, step: Job, note: str) -> Job | None: ...

    def cancel(
        self,
        job_id: str,
        *,
        now: datetime,
        reason: str,
        revision: int | None = None,
        error_type: str | None = None,
    ) -> bool: ...

    def request_cancel(self, job_id: str, *, now: datetime, message: str) -> bool: ...


class CancelStore(RerunStore, EndsDeadRuns, Protocol):
    """``Tracker.cancel(job_id, running=True)``: a cancel request, a run already gone."""


class ReadStore(Reader, ThroughputStore, Protocol):
    """The read side: listings, history, pipelines, statistics and gauges."""

    def find(self, filt: JobFilter, after: Position | None, limit: int) -> list[Job]: ...

    def events(self, job_id: str) -> list[JobEvent]: ...

    def pipeline(self, correlation_id: str) -> list[Job]: ...

    def stats(self, now: datetime | None = None) -> dict[str, dict[str, Any]]: ...

    def queue_health(self, since_s: float = 3600.0) -> dict[str, dict[str, int]]: ...

    def backlog(self, *, cutoff: datetime) -> int: ...


class CircuitStore(RelayStore, CircuitMoves, Protocol):
    """The circuit breakers, and the jobs an open one holds (``store/circuits.py``)."""


class HandOffStore(Protocol):
    """A freed concurrency slot handed to its key's next due job (``services/handoff.py``)."""

    def next_waiting(
        self, key: str, after: str, *, fair: bool = False, fairness_key: str | None = None
    ) -> list[Job]:
        """The jobs of ``key`` that may take the slot ``after`` freed, in the order they
        get it (``store/handoff.py``)."""

    def hand_slot(self, job: Job, limit: int, *, now: datetime) -> Job | None:
        """Give ``job`` a free slot of its key (``HAND_SLOT``): the job as changed, or None."""

    def handed_over(self, job_id: str, now: datetime, revision: int = 0) -> bool: ...


class Store(
    EnqueueStore,
    RunStore,
    ReportStore,
    LeaseStore,
    DeadRunStore,
    ScheduleStore,  # and RelayStore
    ReapingStore,
    CleanupStore,
    SuccessorStore,
    CancelStore,
    ReadStore,
    PauseStore,
    ActionStore,
    HandOffStore,
    CircuitStore,
    MaintenanceStore,
    Protocol,
):
    """The whole store, as ``Tracker`` wires it."""

    def dispose(self) -> None:
        """Close this process's connections (the next call opens new ones)."""
