"""The arguments of the store's fenced moves (``core/ports.py``), one value each.

Pure values: what a claim takes (:class:`Lease`), what fences a takeover
(:class:`Takeover`), how a run ends (:class:`Completion`, :class:`AttemptError`) or a run
that died (:class:`DeadRun`), how the reaper fences a stalled run (:class:`StaleRun`), and
what an undone retry restores (:class:`RetryUndo`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from .jobs import Claim, JobStatus, NewRow

__all__ = [
    "AttemptError",
    "Completion",
    "DeadRun",
    "Lease",
    "RetryUndo",
    "Rows",
    "StaleRun",
    "StallCutoffs",
    "Takeover",
]

#: The rows an outcome inserts in its own transaction (successors).
Rows = Sequence[NewRow]


@dataclass(frozen=True)
class Lease:
    """A claim's lease: taken by ``owner`` for ``worker`` for ``lease_s`` seconds of the
    store's clock, for the job's message ``revision``; with ``concurrency`` (key, limit)
    only while the key has a free slot. ``now`` is for the record."""

    owner: str
    worker: str
    now: datetime
    lease_s: float
    revision: int = 0
    concurrency: tuple[str, int] | None = None


@dataclass(frozen=True)
class Takeover:
    """The fence of a takeover (or of failing a lost last attempt): the attempt last seen,
    a lease that lapsed more than ``grace_s`` ago or whose owner (``stale_owner``) is dead;
    ``reason`` is the history line."""

    seen_attempt: int
    grace_s: float
    stale_owner: str | None
    reason: str


@dataclass(frozen=True)
class Completion:
    """A run's success: its ``result_json``, how long it ran, when; ``rows`` (successors)
    inserted with it."""

    result_json: str | None
    now: datetime
    duration_ms: int
    rows: Rows = ()


class HeldTransaction(Protocol):
    """The body's own transaction on the tracking database (``TrackedTask.transaction``),
    left open when its block ended: the completion is written in it and commits the
    body's writes with it, or it is rolled back (any other outcome, a lost lease)."""

    #: it holds the database's only write lock (SQLite): no other write of this process
    #: can succeed until it ends
    locks_writer: bool

    def complete(self, claim: Claim, done: Completion) -> bool:
        """Write the fenced completion (and ``done.rows``) in this transaction and commit
        it; False, rolled back, when the run no longer holds the lease.

        Raises:
            TransactionFailed: it failed (the server ended it, a statement of the body
                aborted it, the server refused the commit): rolled back; the attempt failed.
            StoreError: the connection died during the commit, which did not happen (True
                if the row reads it did): the database went away.
            Refused: the database refused a row (rolled back).
        """
        ...

    def abandon(self) -> None:
        """Roll it back and close it (nothing it wrote remains)."""
        ...


@dataclass(frozen=True)
class AttemptError:
    """The error an attempt ended with, as recorded: its type and summary, how long the
    attempt ran (None when a later delivery records it), when, and a ``note`` on it (why
    it was not retried)."""

    error_type: str
    error_message: str
    duration_ms: int | None
    now: datetime
    note: str | None = None

    def line(self) -> str:
        """The history line of a failure: the error, then its note."""
        error = f"{self.error_type}: {self.error_message}"
        return error if self.note is None else f"{error}; {self.note}"


@dataclass(frozen=True)
class DeadRun:
    """The end of a run that died outside its call path: fenced to the attempt last seen
    and its lapsed (or dead-owned) lease; ``status`` retrying, failed or cancelled;
    ``message`` is the history line (and a cancellation's ``error_message``); a retry is
    not claimable before ``delay_ms``."""

    seen_attempt: int
    stale_owner: str | None
    status: JobStatus
    error_type: str | None
    error_message: str | None
    message: str
    now: datetime
    delay_ms: int = 0

    @classmethod
    def cancelled(
        cls,
        seen_attempt: int,
        stale_owner: str | None,
        message: str,
        now: datetime,
        error_type: str | None = None,
    ) -> DeadRun:
        """A run asked to stop and gone: cancelled, no error (``error_type``: a deadline's,
        a lost run whose next attempt would start past it)."""
        status = JobStatus.CANCELLED
        return cls(seen_attempt, stale_owner, status, error_type, None, message, now)


@dataclass(frozen=True)
class StallCutoffs:
    """What the reaper's read counts as stalled: a run whose lease lapsed ``grace_s`` ago on
    the store's clock and expired before ``run_cutoff``, a pending job handed over before
    ``pending_cutoff``, a retrying one due before ``retrying_cutoff``."""

    grace_s: float
    run_cutoff: datetime
    pending_cutoff: datetime
    retrying_cutoff: datetime


@dataclass(frozen=True)
class StaleRun:
    """The reaper's fence of a stalled run: its lease lapsed ``grace_s`` ago on the store's
    clock and expired before ``run_cutoff``; ``message`` is the history line."""

    grace_s: float
    run_cutoff: datetime
    message: str
    now: datetime


@dataclass(frozen=True)
class RetryUndo:
    """What an undone retry restores: the ended ``status`` and the job's values before the
    retry, if nobody handed revision ``made`` over."""

    made: int
    status: JobStatus
    max_attempts: int
    finished_at: datetime | None
    retries_exhausted: bool = False
    #: the sealed values it had (``sealing.py``)
    secrets_sealed: str | None = None
    #: the arguments it had, when the retry replaced them (a re-sent job id); None: kept
    payload_json: str | None = None
    #: the deadline it had (the retry may have given a new one)
    deadline_at: datetime | None = None
