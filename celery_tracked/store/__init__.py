"""The tracking database. Knows nothing of Celery.

- ``statements``: every move, each written once as a Core statement; a status change is
  a ``Move`` (conditional ``UPDATE`` + its history row). ``selects``: the reads and the
  deletes of an undone enqueue.
- ``moves``: the allowed moves, each run by one helper (``Moves.apply``), fence included.
- ``outcomes``: how a run ends (completed, retrying, failed), fenced by its claim or, for a
  run that died outside its call path, like a takeover.
- ``cancels``: a cancel request on a running job, and the end of a run asked to stop.
- ``rerun``: the moves that give a job a new message (debounce, ``Tracker.retry``).
- ``giveback``: a claim given back before its body started (no attempt used).
- ``reporting``: a running body's progress (a fenced, non-durable move) and log lines.
- ``reaping``: the stalled-job reaper's reads and moves (rescue, abandon).
- ``reads``: one job, a job by key, a job's history, statistics.
- ``gauges``: the relay's backlog and the expired leases (for the metrics).
- ``purge``: retention cleanup: ended rows and their events removed in bounded batches.
- ``queries``: finding jobs by filters (keyset pages), the queues' health for statistics.
- ``slots``: concurrency keys: a keyed claim under the key's lock, whether a key is full.
- ``clock``: the database's clock, on which leases and backoffs are judged.
- ``engines``: engines per process (fork safety), SQLite pragmas, transactions.
- ``fastpath``: PostgreSQL: the same statements compiled once for psycopg, per-thread
  autocommit connections (each write sets its own ``synchronous_commit``: PgBouncer-safe;
  server-side prepared statements only on a connection proven direct).
- ``translate``: driver errors become ``StoreError`` at the edge.
"""

from __future__ import annotations

from .cancels import Cancels
from .engines import Engines
from .gauges import Gauges
from .giveback import GiveBack
from .moves import Moves
from .outcomes import Outcomes
from .purge import Purge
from .queries import Queries
from .reads import Reads
from .reaping import Reaping
from .reporting import Reporting
from .rerun import Rerun
from .slots import Slots
from .translate import Disconnected, DuplicateJob, Refused

__all__ = ["Disconnected", "DuplicateJob", "JobStore", "Refused"]


class JobStore(
    Moves,
    Outcomes,
    Cancels,
    Reads,
    Queries,
    Rerun,
    Reporting,
    Slots,
    Gauges,
    Reaping,
    Purge,
    GiveBack,
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
