"""The tracking database. Knows nothing of Celery.

One file per store role of ``core/ports.py``, each a mixin of :class:`JobStore` (the memory
store, ``backends/memory/``, and the contract suite, ``tests/contract/``, use the same
names):

- ``enqueue``: a job's row, the undo of a failed enqueue, the hand-over mark, a debounce's
  replacement (``EnqueueStore``, ``Handing``).
- ``claims``: claim, takeover, a lost last attempt, a claim given back, a postponed
  delivery's refresh, a concurrency key's reads (``ClaimStore``).
- ``handoff``: a freed concurrency slot handed to the key's next due waiting job, oldest
  first or round-robin by fairness key (``HandOffStore``).
- ``outcomes``: how a run ends (completed, retrying, failed, cancelled as asked), fenced by
  its claim or, for a run that died outside its call path, like a takeover; its lease's
  renewal and release (``OutcomeStore``, ``LeaseStore``, ``EndsDeadRuns``).
- ``reports``: a running body's progress, log lines and cancel request (``ReportStore``).
- ``relay``: the unpublished rows, the relay's claim and mark (``RelayStore``).
- ``schedule``: the held rows coming due, the scheduler pass's mark (``ScheduleStore``).
- ``reaping``: the stalled-job reaper's reads and moves (``ReapingStore``).
- ``cleanup``: retention: ended rows and their events removed in bounded batches
  (``CleanupStore``).
- ``rerun``: ``Tracker.retry`` and ``Tracker.cancel`` (``RerunStore``).
- ``pauses``: what is paused, and a delivery a pause holds (``PauseStore``,
  ``ClaimStore.hold``).
- ``actions``: the action log, and the ``action`` event on each job an action changed
  (``ActionStore``).
- ``maintenance``: each maintenance plugin's last pass and totals, one upsert per pass
  (``MaintenanceStore``).
- ``circuits``: the circuit breakers' rows, and the jobs an open circuit holds
  (``CircuitStore``).
- ``reads``: one job, a job by key, a history, statistics, listings, gauges
  (``Reader``, ``KeyReader``, ``ReadStore``).

Shared by them:

- ``transitions``: **every status move**, one table: from-statuses → to-status, fence,
  event (``docs/lifecycle.md`` shows it). ``apply``: the one runner of a move
  (``Apply.apply``), fence and history row included.
- ``statements``: the parameters, fences and values of the moves, the ``Move`` shape and
  how it compiles; ``selects``, ``inserts``: the reads and the inserts.
- ``locks``: a concurrency key's lock per dialect, an ``enqueue_in`` key's named lock.
- ``effects``: ``enqueue_in`` and a completion's writes in the caller's transaction.
- ``clock``: the database's clock, on which leases and backoffs are judged.
- ``engines``: engines per process (fork safety), SQLite pragmas, transactions.
- ``fastpath``: PostgreSQL: the same statements compiled once for psycopg, per-thread
  autocommit connections (each write sets its own ``synchronous_commit``: PgBouncer-safe;
  server-side prepared statements only on a connection proven direct).
- ``translate``: driver errors become ``StoreError`` at the edge.
"""

from __future__ import annotations

from .actions import Actions
from .apply import Apply
from .circuits import Circuits
from .claims import Claims
from .cleanup import Cleanup
from .engines import Engines
from .enqueue import Enqueue
from .handoff import HandOff
from .maintenance import Maintenance
from .outcomes import Outcomes
from .pauses import Pauses
from .reads import Reads
from .reaping import Reaping
from .relay import Relay
from .reports import Reports
from .rerun import Rerun
from .schedule import Schedule
from .translate import Disconnected, DuplicateJob, Refused

__all__ = ["Disconnected", "DuplicateJob", "JobStore", "Refused"]


class JobStore(
    Apply,
    Enqueue,
    Claims,
    Outcomes,
    Reports,
    Relay,
    Schedule,
    Reaping,
    Cleanup,
    Rerun,
    Reads,
    Pauses,
    Actions,
    HandOff,
    Circuits,
    Maintenance,
):
    """The tracking database of one app; engines are created per process."""

    def __init__(self, url: str, pooled: bool = False) -> None:
        """``pooled``: PostgreSQL is reached through PgBouncer in transaction pooling mode
        (no server-side prepared statements, not even on a connection that looks direct)."""
        self.url = url
        self.engines = Engines(url, pooled)

    @property
    def is_postgres(self) -> bool:
        return self.engines.is_postgres

    def connect(self) -> None:
        """Make this process's engines now, in the calling thread (see ``Engines``)."""
        self.engines.get()

    def dispose(self) -> None:
        """Close this process's connections (the next call opens new ones)."""
        self.engines.dispose()
