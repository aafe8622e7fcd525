"""Cancelling a running job: the request, and the end of a run that was asked to stop.

``Tracker.cancel(job_id, running=True)`` on a ``processing`` job records a request
(``REQUEST_CANCEL``: ``cancel_requested_at`` set, a ``cancel_requested`` event; the job
stays ``processing`` while its run goes on). From then on the run's own outcome moves
(``COMPLETE``, ``RETRYING``, ``FAIL``), a takeover and the end of a dead run are fenced
out (``statements.UNCANCELLED``); instead:

- the run that still holds the job ends it with ``CANCEL_RUN`` (fenced by its attempt),
  whatever its body did (returned, raised, asked for a retry);
- a run that died (terminated, killed) is ended like any dead run, by ``CANCEL_DEAD``
  (``outcomes.end_dead_run``) once its lease lapsed or its holder is known dead.

A body polls the request through ``SELECT_CANCEL_WANTED`` (``self.cancelled()``).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from ..core.jobs import Claim, JobStatus
from .engines import Applying
from .models import jobs
from .statements import HELD, JOB_ID, MESSAGE, NOW, Move
from .translate import reconnecting, translated

_PROCESSING = (JobStatus.PROCESSING,)

#: processing → processing with a cancel request (once: a second request changes nothing).
REQUEST_CANCEL = Move(
    "request_cancel",
    _PROCESSING,
    JobStatus.PROCESSING,
    {"cancel_requested_at": NOW, "updated_at": NOW},
    (jobs.c.cancel_requested_at.is_(None),),
    "cancel_requested",
)
#: The run asked to stop ended (its body returned or raised): processing → cancelled.
CANCEL_RUN = Move(
    "cancel_run",
    _PROCESSING,
    JobStatus.CANCELLED,
    {
        "updated_at": NOW,
        "locked_by": None,
        "locked_until": None,
        "finished_at": NOW,
        "error_type": None,
        "error_message": MESSAGE,
    },
    (*HELD, jobs.c.cancel_requested_at.is_not(None)),
    "cancelled",
)
SELECT_CANCEL_WANTED = select(jobs.c.status, jobs.c.cancel_requested_at).where(jobs.c.id == JOB_ID)


class Cancels(Applying):
    """The running-cancel side of :class:`~celery_tracked.store.JobStore`."""

    @reconnecting
    def request_cancel(self, job_id: str, *, now: datetime, message: str) -> bool:
        """Record a cancel request on a ``processing`` job; False if it is not
        ``processing`` or a request is already recorded."""
        params = {"job_id": job_id, "now": now, "message": message}
        return self.apply(REQUEST_CANCEL, params) is not None

    @reconnecting
    def cancel_run(self, claim: Claim, *, now: datetime, message: str) -> bool:
        """End the run of ``claim`` as ``cancelled`` if a cancel was requested while it
        still holds the job; False otherwise."""
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "now": now}
        return self.apply(CANCEL_RUN, {**params, "message": message}) is not None

    @reconnecting
    def cancel_wanted(self, job_id: str) -> bool:
        """True once a cancel was requested for the job, or it is ``cancelled``."""
        with translated("reading the job's cancel request"):
            row = self.engines.execute(SELECT_CANCEL_WANTED, {"job_id": job_id})
        if row is None:
            return False
        return row[1] is not None or row[0] == JobStatus.CANCELLED.value
