"""Two counts the metrics read on every scrape (``metrics.py``): the relay's backlog and
the expired leases. Both are answered from the ``status`` index."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select

from ..jobs import JobStatus
from ..models import jobs
from .clock import db_time
from .engines import Engines
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
#: Running rows whose lease has expired on the database's clock.
COUNT_EXPIRED_LEASES = (
    select(func.count())
    .select_from(jobs)
    .where(jobs.c.status == JobStatus.PROCESSING.value, jobs.c.locked_until < db_time())
)


class Gauges:
    """The gauge side of :class:`~celery_tracked.store.JobStore`."""

    engines: Engines

    @reconnecting
    def backlog(self, *, cutoff: datetime) -> tuple[int, int]:
        """``(unpublished pending rows older than cutoff, expired leases)``."""
        with translated("reading the relay backlog"), self.engines.transaction() as conn:
            unpublished = conn.execute(COUNT_UNPUBLISHED, {"cutoff": cutoff}).scalar_one()
            expired = conn.execute(COUNT_EXPIRED_LEASES).scalar_one()
        return int(unpublished), int(expired)
