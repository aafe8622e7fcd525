"""The rows of :class:`~celery_tracked.memory.MemoryStore` and its one way to change them.

Rows are :class:`~celery_tracked.jobs.Job` values by id, the history a list of
:class:`~celery_tracked.jobs.JobEvent`; one lock guards both, so every move (its condition,
its change, its event and the rows it inserts) is atomic, as one conditional ``UPDATE`` in
a transaction is in the SQL store. A move's ``changes`` are computed from the row as it was
(SQL's ``SET`` expressions read the old row). One clock, the store's (``now``, injectable),
stands for the database's: leases, backoffs and the relay's claims are judged on it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import fields, replace
from datetime import datetime, timedelta
from typing import Any

from ...core.actions import Action
from ...core.circuits import CLOSED, HELD_BY_CIRCUIT, Circuit
from ...core.errors import DuplicateJob, Refused, StoreError
from ...core.jobs import (
    CLAIM_EARLY_S,
    NEW_JOB_COLUMNS,
    NEW_JOB_DEFAULTS,
    Claim,
    Job,
    JobEvent,
    JobStatus,
    NewRow,
    utcnow,
)
from ...core.maintenance import MaintenanceRun
from ...core.pauses import HELD_BY_PAUSE, Pause, holding

_JOB_FIELDS = frozenset(f.name for f in fields(Job))
#: The producer's columns of a new row (the SQL insert binds every one of them).
_GIVEN = tuple(c for c in NEW_JOB_COLUMNS if c not in NEW_JOB_DEFAULTS)
#: Of those, the ones that may not be NULL.
_REQUIRED = ("id", "queue_name", "job_type", "task_name", "status", "max_attempts", "created_at")
_EVENT_REQUIRED = ("job_id", "event", "status", "created_at")

#: A move's condition on the row as it is, and its change of it.
Check = Callable[[Job], bool]
Change = Callable[[Job], Mapping[str, Any]]

PENDING = (JobStatus.PENDING,)
PROCESSING = (JobStatus.PROCESSING,)
#: ``statements.END_RUN``
UNLOCKED: dict[str, Any] = {"locked_by": None, "locked_until": None}


def end_run(now: datetime, **changes: Any) -> dict[str, Any]:
    return {"updated_at": now, **UNLOCKED, **changes}


def ended_without_error(
    now: datetime, status: JobStatus, message: str | None, **changes: Any
) -> dict[str, Any]:
    """A run ended completed or cancelled: finished now, no error type."""
    return end_run(
        now, status=status, finished_at=now, error_type=None, error_message=message, **changes
    )


def new_message(job: Job, now: datetime) -> dict[str, Any]:
    """``statements.NEW_MESSAGE``: the next revision, not handed over, nobody's."""
    return {
        "revision": job.revision + 1,
        "published_at": None,
        "locked_by": None,
        "locked_until": None,
        "updated_at": now,
    }


def at_revision(revision: int) -> Any:
    def check(job: Job) -> bool:
        return job.revision == revision

    return check


def unsent(made: int) -> Any:
    """``statements.UNSENT``: the undone move's message was never handed over, by anyone."""

    def check(job: Job) -> bool:
        return job.revision == made and job.published_at is None and job.locked_by is None

    return check


class MemoryCore:
    """Rows, history, the lock and the clock; :meth:`move` and :meth:`add_row`."""

    def __init__(self, now: Callable[[], datetime] = utcnow) -> None:
        """``now``: the store's clock (the database's, in the SQL store)."""
        #: the store's clock (``clock()`` reads it; the moves read it here)
        self.time = now
        #: guards every row and event: each move is atomic under it
        self.lock = threading.RLock()
        #: the rows by id (a test may read them, or place one with :meth:`put`)
        self.rows: dict[str, Job] = {}
        self._events: list[JobEvent] = []
        self._event_ids = 0
        #: ``background_job_pauses``, by (scope, name) (``pauses.py``)
        self.paused: dict[tuple[str, str], Pause] = {}
        #: ``background_job_actions``, oldest first (``actions.py``)
        self.action_log: list[Action] = []
        #: ``background_job_circuits``, by name (``circuits.py``)
        self.breakers: dict[str, Circuit] = {}
        #: ``background_job_maintenance``, by plugin name (``maintenance.py``)
        self.maintenance_runs: dict[str, MaintenanceRun] = {}

    def clock(self) -> datetime:
        """The store's current time: the clock leases and backoffs are judged on."""
        return self.time()

    def at(self, seconds: float) -> datetime:
        """The store's clock ``seconds`` from now (``db_time(offset)``)."""
        return self.time() + timedelta(seconds=seconds)

    def put(self, job: Job) -> None:
        """Place ``job`` as it is (tests: a row in a given state), replacing any row with
        its id."""
        with self.lock:
            self.rows[job.id] = job

    def handed_over_by(
        self, job_id: str, sources: Collection[JobStatus], event: str, hand: Mapping[str, Any]
    ) -> bool:
        """``RELAYED``/``SCHEDULED``: the pass ``hand["owner"]`` still holds the row,
        unpublished, at ``hand["revision"]``: published at ``hand["now"]``, its claim
        released, ``event`` with ``hand["message"]``."""
        now = hand["now"]

        def check(job: Job) -> bool:
            mine = job.locked_by == hand["owner"] and job.published_at is None
            return mine and job.revision == hand["revision"]

        change = {"published_at": now, "locked_by": None, "locked_until": None, "updated_at": now}
        moved = self.move(
            job_id, sources, check, lambda _: change, event, now=now, message=hand["message"]
        )
        return moved is not None

    def move(
        self,
        job_id: str,
        sources: Collection[JobStatus],
        check: Check,
        change: Change,
        event: str | None = None,
        *,
        now: datetime | None = None,
        message: str | None = None,
        duration_ms: int | None = None,
        rows: Sequence[NewRow] = (),
    ) -> Job | None:
        """Change the row if it is in ``sources`` and passes ``check``: its ``event``
        appended (status and attempt the moved row's), ``rows`` inserted. The moved row, or
        None when the move did not apply (nothing changed)."""
        with self.lock:
            job = self.rows.get(job_id)
            if job is None or job.status not in sources or not check(job):
                return None
            before = (dict(self.rows), list(self._events), self._event_ids) if rows else None
            moved = replace(job, **change(job))
            self.rows[job_id] = moved
            if event is not None:
                assert now is not None, "a move with an event is recorded at ``now``"
                self.append_event(moved, event, now, message, duration_ms)
            try:
                for row in rows:
                    self.insert_row(row)
            except BaseException:
                if before is not None:  # rolled back whole, as a transaction
                    self.rows, self._events, self._event_ids = before
                raise
            return moved

    def lapsed(self, job: Job, seen: int, grace_s: float, stale_owner: str | None) -> bool:
        """``statements.LAPSED``: the attempt last seen, and a lease released, expired more
        than ``grace_s`` ago, or held by ``stale_owner`` (known dead)."""
        until = job.locked_until
        return job.attempts_made == seen and (
            until is None
            or until < self.at(-grace_s)
            or (stale_owner is not None and job.locked_by == stale_owner)
        )

    def unpaused(self, job: Job) -> bool:
        """``statements.UNPAUSED``: no pause covers the row's queue or job type."""
        return holding(self.paused.values(), job.queue_name, job.job_type) is None

    def untripped(self, job: Job) -> bool:
        """``statements.UNTRIPPED``: no open or half-open circuit holds the row."""
        held = (job.locked_by or "").startswith(HELD_BY_CIRCUIT)
        breaker = self.breakers.get((job.locked_by or "")[len(HELD_BY_CIRCUIT) :])
        return not held or breaker is None or breaker.state == CLOSED

    @staticmethod
    def on_purpose(job: Job) -> bool:
        """``statements.HELD_ON_PURPOSE``: held by a pause or a circuit."""
        by = job.locked_by or ""
        return by == HELD_BY_PAUSE or by.startswith(HELD_BY_CIRCUIT)

    def due_time(self, due_in_s: float | None, due_at: datetime | None) -> datetime | None:
        """``inserts.DUE_AT``: at ``due_at``, else ``due_in_s`` from now, else None."""
        if due_at is not None:
            return due_at
        return None if due_in_s is None else self.at(float(due_in_s))

    def due_to_claim(self, not_before: datetime | None) -> bool:
        """``statements.DUE_TO_CLAIM``: no due time, or it comes within ``CLAIM_EARLY_S``."""
        return not_before is None or not_before <= self.at(CLAIM_EARLY_S)

    def free(self, until: datetime | None) -> bool:
        """``statements.UNLOCKED``/``DUE``: no time set, or it has come."""
        return until is None or until <= self.time()

    def append_event(
        self,
        job: Job,
        event: str,
        now: datetime,
        message: str | None = None,
        duration_ms: int | None = None,
        status: JobStatus | None = None,
    ) -> None:
        """A history row copied from ``job`` (its status unless ``status`` is given)."""
        self._event_ids += 1
        self._events.append(
            JobEvent(
                self._event_ids,
                job.id,
                event,
                job.status if status is None else status,
                job.attempts_made,
                message,
                duration_ms,
                now,
            )
        )

    def history(self, job_id: str) -> list[JobEvent]:
        """The job's events, oldest first."""
        with self.lock:
            return [e for e in self._events if e.job_id == job_id]

    def drop(self, job_ids: Collection[str]) -> int:
        """Remove the rows and their events; how many events went."""
        with self.lock:
            for job_id in job_ids:
                self.rows.pop(job_id, None)
            kept = [e for e in self._events if e.job_id not in job_ids]
            gone = len(self._events) - len(kept)
            self._events = kept
            return gone

    def add_row(self, values: Mapping[str, Any], if_absent: bool = False) -> Job | None:
        """A new job row from the producer's ``values`` (as the SQL insert's columns).

        Raises:
            DuplicateJob: its id or ``(job_type, idempotency_key, key_round)`` is taken
                (``if_absent``: nothing is inserted, None is returned instead).
            StoreError: a producer's column is not given (``Refused``: NULL where a value is
                required, or a column the table does not have).
        """
        values = dict(values)
        due = self.due_time(values.pop("due_in_s", None), values.pop("due_at", None))
        if due is not None:
            values["not_before"] = due
        ends = self.due_time(values.pop("deadline_in_s", None), values.pop("deadline_at", None))
        if ends is not None:  # ``inserts.DEADLINE_AT``
            values["deadline_at"] = ends
        unknown = set(values) - _JOB_FIELDS
        if unknown:
            raise Refused(f"inserting the job row failed: no columns {sorted(unknown)}")
        absent = [name for name in _GIVEN if name not in values]
        if absent:
            raise StoreError(f"inserting the job row failed: no value given for {absent}")
        missing = [name for name in _REQUIRED if values[name] is None]
        if missing:
            raise Refused(f"inserting the job row failed: {missing} may not be NULL")
        given = {**NEW_JOB_DEFAULTS, **values}
        for name in _JOB_FIELDS - set(given):
            given[name] = None
        job = Job(**{**given, "status": JobStatus(given["status"])})
        with self.lock:
            if self._taken(job):
                if if_absent:
                    return None
                raise DuplicateJob()
            self.rows[job.id] = job
            return job

    def _taken(self, job: Job) -> bool:
        if job.id in self.rows:
            return True
        if job.idempotency_key is None:  # NULLs are distinct in a unique constraint
            return False
        key = (job.job_type, job.idempotency_key, job.key_round)
        return any(
            (other.job_type, other.idempotency_key, other.key_round) == key
            for other in self.rows.values()
        )

    def insert_row(self, row: NewRow) -> None:
        """A row inserted with a move: a new job (unless taken) with its ``enqueued`` event,
        or a history row."""
        if row.new_job:
            job = self.add_row(row.values, if_absent=True)
            if job is not None:  # the event is copied from the row: none when skipped
                self.append_event(job, "enqueued", job.created_at, row.message)
            return
        values = row.values
        missing = [name for name in _EVENT_REQUIRED if values.get(name) is None]
        if missing:
            raise Refused(f"inserting a history row failed: {missing} missing")
        self._event_ids += 1
        status = JobStatus(values["status"])
        self._events.append(
            JobEvent(
                self._event_ids,
                str(values["job_id"]),
                str(values["event"]),
                status,
                int(values.get("attempt", 0)),
                values.get("message"),
                values.get("duration_ms"),
                values["created_at"],
            )
        )

    def held_by(self, claim: Claim, uncancelled: bool = True) -> Any:
        """``HELD`` (and ``UNCANCELLED``)."""

        def check(job: Job) -> bool:
            held = job.attempts_made == claim.attempt
            return held and (not uncancelled or job.cancel_requested_at is None)

        return check

    def move_running(
        self,
        job_id: str,
        check: Any,
        change: Mapping[str, Any],
        event: str | None,
        now: datetime,
        message: str | None = None,
        duration_ms: int | None = None,
        rows: Sequence[NewRow] = (),
    ) -> bool:
        """A move from ``processing`` with fixed ``change``: whether it applied."""
        moved = self.move(
            job_id,
            PROCESSING,
            check,
            lambda _: change,
            event,
            now=now,
            message=message,
            duration_ms=duration_ms,
            rows=rows,
        )
        return moved is not None

    def _undo(
        self,
        job_id: str,
        made: int,
        change: Mapping[str, Any],
        event: str,
        now: datetime,
        message: str,
    ) -> bool:
        """An ``UNDO_*`` move: pending at revision ``made``, its message never sent."""
        check = unsent(made)
        moved = self.move(job_id, PENDING, check, lambda _: change, event, now=now, message=message)
        return moved is not None
