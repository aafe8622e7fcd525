"""The memory store's writes of a running body: progress and log lines, and the cancel
of a running job (its request, the run's end as ``cancelled``).

Each mirrors one statement of the SQL store (``store/reporting.py``, ``store/cancels.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..core.jobs import Claim, Job, JobStatus
from .memory_runs import MemoryRuns, ended_without_error

_PROCESSING = (JobStatus.PROCESSING,)
_LOG_EVENT = "log"


class MemoryReports(MemoryRuns):
    """A running body's reports and a running job's cancel."""

    def request_cancel(self, job_id: str, *, now: datetime, message: str) -> bool:
        """``REQUEST_CANCEL``: once."""
        change = {"cancel_requested_at": now, "updated_at": now}
        check = self._requested(False)
        return self.move_running(job_id, check, change, "cancel_requested", now, message)

    @staticmethod
    def _requested(wanted: bool) -> Any:
        def check(job: Job) -> bool:
            return (job.cancel_requested_at is not None) is wanted

        return check

    def cancel_run(self, claim: Claim, *, now: datetime, message: str) -> bool:
        """``CANCEL_RUN``: held, and a cancel was requested."""

        def check(job: Job) -> bool:
            return job.attempts_made == claim.attempt and job.cancel_requested_at is not None

        change = ended_without_error(now, JobStatus.CANCELLED, message)
        return self.move_running(claim.job_id, check, change, "cancelled", now, message)

    def cancel_wanted(self, job_id: str) -> bool:
        job = self.rows.get(job_id)
        if job is None:
            return False
        return job.cancel_requested_at is not None or job.status is JobStatus.CANCELLED

    def report_progress(
        self, claim: Claim, *, percent: int, stage: str | None, now: datetime
    ) -> bool:
        """``PROGRESS``: no event; a stage of None keeps the row's."""

        def change(job: Job) -> Mapping[str, Any]:
            kept = job.stage if stage is None else stage
            return {"progress": percent, "stage": kept, "updated_at": now}

        check = self.held_by(claim, False)
        return self.move(claim.job_id, _PROCESSING, check, change) is not None

    def log_line(self, claim: Claim, *, message: str, now: datetime) -> bool:
        """``LOG_LINE``: a ``log`` event while the run holds the job."""
        with self.lock:
            job = self.rows.get(claim.job_id)
            held = job is not None and job.status is JobStatus.PROCESSING
            if job is None or not held or job.attempts_made != claim.attempt:
                return False
            self.append_event(job, _LOG_EVENT, now, message)
            return True

    def log_lines(self, job_id: str) -> int:
        return sum(1 for e in self.history(job_id) if e.event == _LOG_EVENT)
