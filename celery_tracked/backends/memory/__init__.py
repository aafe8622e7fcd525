"""An in-memory store: the whole store contract (:class:`~celery_tracked.ports.Store`)
with no database, for tests and for code that wants the lifecycle without SQL.

It keeps the SQL store's semantics, move by move (the same statuses, fences and events:
``tests/contract`` runs one suite against both): conditional moves fenced by the claim's
attempt and the lease's owner, leases and backoffs judged on one clock (``now``, injectable
for tests), ``(job_type, idempotency_key, key_round)`` unique, keyed concurrency claims
counted under one lock, progress and log lines, the relay's claim and hand-over, the
reaper's and the cleanup's reads and moves, cancels and ``Tracker.retry``. Thread-safe: one
lock guards every row and event. Nothing survives the process.

One file per store role, named like the SQL store's (``store/claims.py`` and
``claims.py`` here, ...), each a mixin on ``rows.py`` (the rows, the lock, the clock and the
one ``move`` helper).

    store = MemoryStore()
    store.insert({...})                       # as the producer's row
    claim = store.claim(job_id, Lease(owner=..., worker=..., now=utcnow(), lease_s=60))
"""

from __future__ import annotations

from ...core.ports import Store
from .actions import MemoryActions
from .circuits import MemoryCircuits
from .claims import MemoryClaims
from .cleanup import MemoryCleanup
from .enqueue import MemoryEnqueue
from .handoff import MemoryHandOff
from .maintenance import MemoryMaintenance
from .outcomes import MemoryOutcomes
from .pauses import MemoryPauses
from .reads import MemoryReads
from .reaping import MemoryReaping
from .relay import MemoryRelay
from .reports import MemoryReports
from .rerun import MemoryRerun
from .schedule import MemorySchedule

__all__ = ["MemoryStore"]


class MemoryStore(
    MemoryEnqueue,
    MemoryClaims,
    MemoryOutcomes,
    MemoryReports,
    MemoryRelay,
    MemorySchedule,
    MemoryReaping,
    MemoryCleanup,
    MemoryRerun,
    MemoryReads,
    MemoryPauses,
    MemoryActions,
    MemoryHandOff,
    MemoryCircuits,
    MemoryMaintenance,
):
    """The store contract in memory (see the module's docstring)."""

    def connect(self) -> None:
        """Nothing to open."""

    def dispose(self) -> None:
        """Nothing to close (the rows stay)."""


def conforms(store: MemoryStore) -> Store:
    """``store`` as the contract (mypy checks here that it implements every role)."""
    return store
