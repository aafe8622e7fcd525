"""What a running body reports (``ReportStore``): its progress and its log lines, and the
cancel request it polls (``self.cancelled()``).

``PROGRESS`` (``transitions.py``) is a move with no target status and no event (progress
is not a transition), fenced like ``RENEW`` (the run's attempt, ``processing``) and not
durable (a lost progress write only shows an older value; the
completion sets ``progress = 100`` durably). A stage left out (NULL) keeps the row's stage.

``LOG_LINE`` appends a ``log`` event to ``background_job_events``, copied from the row only
while the run holds it (``processing`` at the run's attempt): a run that lost its lease
writes no history. Its ``status`` and ``attempt`` are the row's.
"""

from __future__ import annotations

import functools
from datetime import datetime

from sqlalchemy import Insert, String, func, insert, literal, select

from ..core.jobs import Claim, JobStatus
from .engines import Applying
from .models import events, jobs
from .statements import HELD, JOB_ID, MESSAGE, NOW
from .transitions import PROGRESS
from .translate import reconnecting, translated

#: The ``event`` of a body's log line in ``background_job_events``.
LOG_EVENT = "log"

_RUNNING = (jobs.c.id == JOB_ID, jobs.c.status == JobStatus.PROCESSING.value, *HELD)
LOG_LINE: Insert = insert(events).from_select(
    ["job_id", "event", "status", "attempt", "message", "created_at"],
    select(
        jobs.c.id,
        literal(LOG_EVENT, String),
        jobs.c.status,
        jobs.c.attempts_made,
        MESSAGE,
        NOW,
    ).where(*_RUNNING),
)
SELECT_CANCEL_WANTED = select(jobs.c.status, jobs.c.cancel_requested_at).where(jobs.c.id == JOB_ID)
COUNT_LOG_LINES = (
    select(func.count())
    .select_from(events)
    .where(events.c.job_id == JOB_ID, events.c.event == LOG_EVENT)
)


@functools.cache
def log_line_returning() -> Insert:
    """PostgreSQL fast path: ``LOG_LINE`` saying whether it inserted (a row, or none)."""
    return LOG_LINE.returning(events.c.id)


class Reports(Applying):
    """The reporting side of :class:`~celery_tracked.store.JobStore` (``Apply.apply``)."""

    @reconnecting
    def report_progress(
        self, claim: Claim, *, percent: int, stage: str | None, now: datetime
    ) -> bool:
        """Set the running job's ``progress`` (and ``stage``, unless None), fenced by the
        claim; False when the run no longer holds the job."""
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "now": now}
        params.update(percent=percent, stage_label=stage)
        return self.apply(PROGRESS, params) is not None

    def log_line(self, claim: Claim, *, message: str, now: datetime) -> bool:
        """Append a ``log`` event while the run holds the job; False when it does not.

        Not re-sent on a dead connection (a line may be lost, never doubled)."""
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "message": message}
        params["now"] = now
        engines = self.engines.get()
        with translated("writing a log line of the job"):
            if engines.fastpath is not None:
                row = engines.fastpath.execute("log_line", log_line_returning, params)
                return row is not None
            with engines.transaction() as conn:
                if engines.is_postgres:  # psycopg reports no rowcount for INSERT ... SELECT
                    return conn.execute(log_line_returning(), params).first() is not None
                return conn.execute(LOG_LINE, params).rowcount == 1

    @reconnecting
    def log_lines(self, job_id: str) -> int:
        """How many ``log`` events the job has (all attempts)."""
        with translated("counting the job's log lines"):
            row = self.engines.execute(COUNT_LOG_LINES, {"job_id": job_id})
        return 0 if row is None else int(row[0])

    @reconnecting
    def cancel_wanted(self, job_id: str) -> bool:
        """True once a cancel was requested for the job, or it is ``cancelled``."""
        with translated("reading the job's cancel request"):
            row = self.engines.execute(SELECT_CANCEL_WANTED, {"job_id": job_id})
        if row is None:
            return False
        return row[1] is not None or row[0] == JobStatus.CANCELLED.value
