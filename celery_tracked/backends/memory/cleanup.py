"""Retention cleanup (``PurgeStore``): the batches of ended rows removed with their events,
dry-run counts, keep-newest boundaries.

Each mirrors one move or read of the SQL store's ``store/cleanup.py`` with the same condition
(its name in the docstring), judged on the store's clock.
"""

from __future__ import annotations

from datetime import datetime

from ...core.cleanup import ENDED, Boundary, Sweep
from ...core.jobs import Batch, Job, Removed
from .rows import MemoryCore


class MemoryCleanup(MemoryCore):
    """The memory store's cleanup (see the module's docstring)."""

    def _admitted(self, sweep: Sweep) -> list[Job]:
        """The sweep's rows, oldest ``finished_at`` (then id) first."""
        found = [
            j
            for j in self.rows.values()
            if sweep.admits(j.status.value, j.task_name, j.queue_name, j.finished_at, j.id)
        ]
        return sorted(found, key=lambda j: (j.finished_at, j.id))

    def purge_batch(self, sweep: Sweep, cursor: tuple[datetime, str], limit: int) -> Batch:
        """``cleanup.statements``: the next ``limit`` rows after ``cursor``, removed with
        their events."""
        with self.lock:
            rows = [j for j in self._admitted(sweep) if (j.finished_at, j.id) > cursor][:limit]
            if not rows:
                return Batch((), 0, None)
            n_events = self.drop({j.id for j in rows})
        removed = tuple(Removed(j.id, j.job_type, j.idempotency_key, j.created_at) for j in rows)
        last = rows[-1]
        assert last.finished_at is not None
        return Batch(removed, n_events, (last.finished_at, last.id))

    def purge_count(self, sweep: Sweep) -> int:
        with self.lock:
            return len(self._admitted(sweep))

    def keep_boundaries(self, keep: int) -> list[tuple[str, Boundary]]:
        """``cleanup.boundaries``: per queue and ended status, its ``keep``-th newest row."""
        groups: dict[tuple[str, str], list[Job]] = {}
        with self.lock:
            for job in self.rows.values():
                if job.status.value in ENDED and job.finished_at is not None:
                    groups.setdefault((job.queue_name, job.status.value), []).append(job)
        out: list[tuple[str, Boundary]] = []
        for (queue, status), jobs in groups.items():
            if len(jobs) >= keep:
                jobs.sort(key=lambda j: (j.finished_at, j.id), reverse=True)
                nth = jobs[keep - 1]
                assert nth.finished_at is not None
                out.append((status, Boundary(queue, nth.finished_at, nth.id)))
        return out
