"""The relay's reads and moves (``RelayStore``): the unpublished rows, its claim of one,
its mark once published.

Each mirrors one move or read of the SQL store's ``store/relay.py`` with the same condition
(its name in the docstring), judged on the store's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ...core.jobs import CLAIMABLE, Job, JobStatus
from .rows import MemoryCore


class MemoryRelay(MemoryCore):
    """The memory store's relay (see the module's docstring)."""

    def _unpublished(self, job: Job, cutoff: datetime) -> bool:
        """``statements.UNPUBLISHED``."""
        until = job.locked_until
        unheld = until is None or until < self.time()
        old = job.updated_at < cutoff or self.on_purpose(job)
        free = unheld and self.unpaused(job) and self.untripped(job)
        return job.published_at is None and old and free

    def unpublished(self, *, cutoff: datetime, now: datetime) -> list[str]:
        """``SELECT_UNPUBLISHED`` and ``SELECT_HELD_RETRYING``: oldest first, at most 100."""
        with self.lock:
            found = [
                j
                for j in self.rows.values()
                if (
                    (
                        j.status is JobStatus.PENDING
                        and (j.not_before is None or j.not_before <= now)
                    )
                    or (j.status is JobStatus.RETRYING and self.on_purpose(j))
                )
                and self._unpublished(j, cutoff)
            ]
        found.sort(key=lambda j: j.created_at)
        return [j.id for j in found[:100]]

    def relay_claim(
        self,
        job_id: str,
        *,
        owner: str,
        now: datetime,
        lease_s: float,
        cutoff: datetime,
        moved_due: datetime | None = None,
    ) -> bool:
        """``RELAY_CLAIM``: no event, ``updated_at`` kept; ``moved_due``: its new due time."""

        def check(job: Job) -> bool:
            return self._unpublished(job, cutoff)

        def change(job: Job) -> Mapping[str, Any]:
            due = job.not_before if moved_due is None else moved_due
            return {"locked_by": owner, "locked_until": self.at(lease_s), "not_before": due}

        return self.move(job_id, CLAIMABLE, check, change) is not None

    def relayed(
        self, job_id: str, *, owner: str, now: datetime, message: str, revision: int = 0
    ) -> bool:
        """``RELAYED``: the relay ``owner`` still holds it, unpublished, current."""
        hand = {"owner": owner, "now": now, "message": message, "revision": revision}
        return self.handed_over_by(job_id, CLAIMABLE, "relayed", hand)
