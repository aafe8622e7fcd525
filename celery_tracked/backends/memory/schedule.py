"""The scheduler pass's reads and moves (``ScheduleStore``): the held rows coming due and its
mark (it claims with the relay's claim, ``relay.py``).

Each mirrors one move or read of the SQL store's ``store/schedule.py`` with the same
condition (its name in the docstring), judged on the store's clock.
"""

from __future__ import annotations

from datetime import datetime

from ...core.jobs import Job, JobStatus
from .rows import PENDING, MemoryCore


class MemorySchedule(MemoryCore):
    """The memory store's scheduler pass (see the module's docstring)."""

    def held_due(self, *, until: datetime, limit: int = 100) -> list[Job]:
        """``HELD_DUE``: due first, at most ``limit``."""
        with self.lock:
            found = [
                j
                for j in self.rows.values()
                if j.status is JobStatus.PENDING
                and j.published_at is None
                and j.not_before is not None
                and j.not_before <= until
                and (j.locked_until is None or j.locked_until < self.time())
                and self.unpaused(j)
                and self.untripped(j)
            ]
        found.sort(key=lambda j: j.not_before or until)
        return found[:limit]

    def scheduled(
        self, job_id: str, *, owner: str, now: datetime, message: str, revision: int = 0
    ) -> bool:
        """``SCHEDULED``: as ``RELAYED``, with its own event."""
        hand = {"owner": owner, "now": now, "message": message, "revision": revision}
        return self.handed_over_by(job_id, PENDING, "scheduled", hand)
