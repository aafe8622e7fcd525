"""What a running body reports (``ReportStore``): progress, log lines, the cancel request it
polls.

Each mirrors one move or read of the SQL store's ``store/reports.py`` with the same condition
(its name in the docstring), judged on the store's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ...core.jobs import Claim, Job, JobStatus
from .rows import PROCESSING, MemoryCore

_LOG_EVENT = "log"


class MemoryReports(MemoryCore):
    """The memory store's reports (see the module's docstring)."""

    def report_progress(
        self, claim: Claim, *, percent: int, stage: str | None, now: datetime
    ) -> bool:
        """``PROGRESS``: no event; a stage of None keeps the row's."""

        def change(job: Job) -> Mapping[str, Any]:
            kept = job.stage if stage is None else stage
            return {"progress": percent, "stage": kept, "updated_at": now}

        check = self.held_by(claim, False)
        return self.move(claim.job_id, PROCESSING, check, change) is not None

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

    def cancel_wanted(self, job_id: str) -> bool:
        job = self.rows.get(job_id)
        if job is None:
            return False
        return job.cancel_requested_at is not None or job.status is JobStatus.CANCELLED
