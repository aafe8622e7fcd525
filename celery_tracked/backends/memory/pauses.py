"""What is paused, in memory (``store/pauses.py``): the pauses by scope and name, and the
hold of a delivery a pause covers (``HOLD``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ...core.circuits import held_by
from ...core.jobs import CLAIMABLE, Job
from ...core.pauses import HELD_BY_PAUSE, Pause
from .rows import MemoryCore


class MemoryPauses(MemoryCore):
    """The memory store's pauses (see the module's docstring)."""

    def pause(self, scope: str, name: str, *, by: str | None, reason: str | None) -> bool:
        """``INSERT_PAUSE``: False when that scope and name were paused already."""
        with self.lock:
            if (scope, name) in self.paused:
                return False
            self.paused[scope, name] = Pause(scope, name, by, self.time(), reason)
            return True

    def resume(self, scope: str, name: str) -> bool:
        """``DELETE_PAUSE``."""
        with self.lock:
            return self.paused.pop((scope, name), None) is not None

    def pauses(self) -> list[Pause]:
        """``SELECT_PAUSES``: oldest first."""
        with self.lock:
            found = list(self.paused.values())
        return sorted(found, key=lambda p: (p.paused_at, p.scope, p.name))

    def hold(
        self, job_id: str, revision: int, *, now: datetime, message: str, circuit: str = ""
    ) -> bool:
        """``HOLD`` (``CIRCUIT_HOLD`` for a ``circuit``): a waiting row of ``revision`` that
        nobody holds."""

        def check(job: Job) -> bool:
            return job.revision == revision and self.free(job.locked_until)

        def change(job: Job) -> Mapping[str, Any]:
            return {
                "revision": job.revision + 1,
                "published_at": None,
                "locked_by": held_by(circuit) if circuit else HELD_BY_PAUSE,
                "locked_until": None,
                "updated_at": now,
            }

        event = "circuit_open" if circuit else "paused"
        moved = self.move(job_id, CLAIMABLE, check, change, event, now=now, message=message)
        return moved is not None
