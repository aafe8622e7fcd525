"""The count the metrics read on every scrape besides ``stats`` (``metrics.py``): the
relay's backlog, answered from the ``(status, created_at)`` index."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select

from ..core.jobs import JobStatus
from .engines import Engines
from .models import jobs
from .statements import CUTOFF
from .translate import reconnecting, translated

#: Pending rows whose message was never handed to the broker, older than the relay's grace.
COUNT_UNPUBLISHED = (
    select(func.count())
    .select_from(jobs)
    .where(
        jobs.c.status == JobStatus.PENDING.value,
        jobs.c.published_at.is_(None),
        jobs.c.updated_at < CUTOFF,
    )
)


class Gauges:
    """The gauge side of :class:`~celery_tracked.store.JobStore`."""

    engines: Engines

    @reconnecting
    def backlog(self, *, cutoff: datetime) -> int:
        """Pending rows never handed to the broker, last changed before ``cutoff``."""
        with translated("reading the relay backlog"), self.engines.transaction() as conn:
            return int(conn.execute(COUNT_UNPUBLISHED, {"cutoff": cutoff}).scalar_one())
