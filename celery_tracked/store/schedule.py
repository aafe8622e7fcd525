"""The scheduler pass's side of the store (``ScheduleStore``): the held rows coming due, and
its mark once it published one (it claims a row with the relay's claim, ``relay.py``).
"""

from __future__ import annotations

from datetime import datetime

from ..core.jobs import Job
from . import selects
from . import transitions as moves
from .engines import Applying
from .translate import reconnecting, translated


class Schedule(Applying):
    """The scheduler pass's side of :class:`~celery_tracked.store.JobStore`."""

    @reconnecting
    def held_due(self, *, until: datetime, limit: int = 100) -> list[Job]:
        """Pending rows without a message, due by ``until``, nobody's now; due first."""
        params = {"until": until, "limit": limit}
        with translated("reading held jobs"), self.engines.transaction() as conn:
            return [Job.from_row(r) for r in conn.execute(selects.HELD_DUE, params).mappings()]

    @reconnecting
    def scheduled(
        self, job_id: str, *, owner: str, now: datetime, message: str, revision: int = 0
    ) -> bool:
        """The scheduler pass ``owner`` published the held row it claimed (at ``revision``)."""
        params = {"job_id": job_id, "owner": owner, "now": now, "message": message}
        params["at_revision"] = revision
        return self.apply(moves.SCHEDULED, params) is not None
