"""A freed concurrency slot handed to the key's next due waiting job (``HandOffStore``).

Mirrors ``store/handoff.py``: ``NEXT_WAITING`` (``_FAIR``) and ``HAND_SLOT``, judged on the
store's clock under its one lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...core.jobs import CLAIMABLE, Job
from ...core.limits import HANDOFF_S, SLOT_HANDED
from .rows import MemoryCore

#: ``handoff.CANDIDATES``
CANDIDATES = 3


class MemoryHandOff(MemoryCore):
    """The memory store's hand-off (see the module's docstring)."""

    if TYPE_CHECKING:  # provided by ``MemoryClaims``

        def holders(self, key: str, job_id: str) -> int: ...

    def _may_take(self, job: Job, key: str, after: str) -> bool:
        """``handoff._waiting``'s condition."""
        return (
            job.concurrency_key == key
            and job.status in CLAIMABLE
            and self.free(job.not_before)  # ``DUE``
            and (job.deadline_at is None or job.deadline_at > self.time())  # ``ALIVE``
            and self.free(job.locked_until)  # ``UNLOCKED``
            and job.published_at is not None
            and job.id != after
            and self.unpaused(job)
        )

    def next_waiting(
        self, key: str, after: str, *, fair: bool = False, fairness_key: str | None = None
    ) -> list[Job]:
        """``NEXT_WAITING`` (``NEXT_WAITING_FAIR``)."""

        def order(job: Job) -> tuple[Any, ...]:
            oldest = (job.created_at, job.id)
            if not fair:
                return oldest
            later = (
                fairness_key is not None
                and job.fairness_key is not None
                and job.fairness_key > fairness_key
            )
            # SQL sorts NULL last, ascending (PostgreSQL, and SQLite/MariaDB's NULL first is
            # never mixed with keys: a fair task gives every job one)
            return (0 if later else 1, job.fairness_key is None, job.fairness_key or "", *oldest)

        with self.lock:
            found = [j for j in self.rows.values() if self._may_take(j, key, after)]
        return sorted(found, key=order)[:CANDIDATES]

    def hand_slot(self, job: Job, limit: int, *, now: datetime) -> Job | None:
        """``HAND_SLOT``: current, due, unlocked, alive, and a free slot."""
        key = job.concurrency_key
        assert key is not None

        def check(row: Job) -> bool:
            return (
                row.revision == job.revision
                and self.free(row.not_before)
                and self.free(row.locked_until)
                and (row.deadline_at is None or row.deadline_at > self.time())
                and limit > self.holders(key, row.id)
            )

        def change(row: Job) -> Mapping[str, Any]:
            return {
                "revision": row.revision + 1,
                "published_at": None,
                "locked_by": SLOT_HANDED,
                "locked_until": self.at(HANDOFF_S),
                "updated_at": now,
            }

        message = f"a freed slot of concurrency key {key!r} handed to it"
        return self.move(job.id, CLAIMABLE, check, change, "slot_handed", now=now, message=message)
