"""How a run ends (``OutcomeStore``, ``LeaseStore``, ``EndsDeadRuns``): completed, retrying,
failed, cancelled as asked, the end of a dead run; its lease's renewal and release.

Each mirrors one move or read of the SQL store's ``store/outcomes.py`` with the same condition
(its name in the docstring), judged on the store's clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ...core.fences import AttemptError, Completion, DeadRun, Rows
from ...core.jobs import Claim, Job, JobStatus, NewRow
from .rows import MemoryCore, end_run, ended_without_error


class MemoryOutcomes(MemoryCore):
    """The memory store's outcomes (see the module's docstring)."""

    def end_dead_run(self, job_id: str, dead: DeadRun) -> bool:
        """``RETRY_DEAD``/``FAIL_DEAD``/``CANCEL_DEAD``: lapsed (no grace); the first two
        only while no cancel was requested."""
        status, now = dead.status, dead.now
        cancelling = status is JobStatus.CANCELLED

        def check(job: Job) -> bool:
            lapsed = self.lapsed(job, dead.seen_attempt, 0.0, dead.stale_owner)
            return lapsed and (cancelling or job.cancel_requested_at is None)

        error = {"error_type": dead.error_type, "error_message": dead.error_message}
        ended = end_run(now, status=status, **error)
        if status is JobStatus.RETRYING:
            ended["not_before"] = self.at(dead.delay_ms / 1000)
        else:
            ended["finished_at"] = now
        if status is JobStatus.FAILED:
            ended["retries_exhausted"] = True
        if cancelling:
            ended.update(error_type=dead.error_type, error_message=dead.message)
        return self.move_running(job_id, check, ended, status.value, now, dead.message)

    def complete(self, claim: Claim, done: Completion, resent: bool = False) -> bool:
        """``COMPLETE``; ``resent``: a row this very attempt completed counts as saved."""
        now = done.now
        ended = ended_without_error(
            now, JobStatus.COMPLETED, None, result_json=done.result_json, progress=100
        )
        check = self.held_by(claim)
        args = (ended, "completed", now, None, done.duration_ms, done.rows)
        if self.move_running(claim.job_id, check, *args):
            return True
        job = self.rows.get(claim.job_id)
        saved = job is not None and (job.attempts_made, job.status) == (
            claim.attempt,
            JobStatus.COMPLETED,
        )
        return resent and saved

    def retrying(self, claim: Claim, error: AttemptError, delay_ms: int) -> bool:
        """``RETRYING``: due after ``delay_ms`` on the store's clock."""
        message = f"retry in {delay_ms} ms after {error.error_type}: {error.error_message}"
        due = {"not_before": self.at(delay_ms / 1000)}
        return self._ended(claim, JobStatus.RETRYING, error, message, (), due)

    def fail(
        self, claim: Claim, error: AttemptError, rows: Rows = (), retries_exhausted: bool = False
    ) -> bool:
        """``FAIL``, with ``rows`` in the same step."""
        message = error.line()
        done = {"finished_at": error.now, "retries_exhausted": retries_exhausted}
        return self._ended(claim, JobStatus.FAILED, error, message, rows, done)

    def _ended(
        self,
        claim: Claim,
        status: JobStatus,
        error: AttemptError,
        message: str,
        rows: Sequence[NewRow],
        extra: Mapping[str, Any],
    ) -> bool:
        """``outcomes._end_run``: ``message`` is the event's."""
        now = error.now
        failed = {"error_type": error.error_type, "error_message": error.error_message}
        change = {**end_run(now, status=status, **failed), **extra}
        return self.move_running(
            claim.job_id,
            self.held_by(claim),
            change,
            status.value,
            now,
            message[:1000],
            error.duration_ms,
            rows,
        )

    def renew(self, claim: Claim, lease_seconds: float) -> bool:
        """``RENEW``: no event, no ``updated_at``."""
        change = {"locked_until": self.at(lease_seconds)}
        return self.move_running(
            claim.job_id, self.held_by(claim, False), change, None, self.time()
        )

    def release(self, claim: Claim, now: datetime) -> bool:
        """``RELEASE``."""
        return self.move_running(claim.job_id, self.held_by(claim, False), end_run(now), None, now)

    def cancel_run(self, claim: Claim, *, now: datetime, message: str) -> bool:
        """``CANCEL_RUN``: held, and a cancel was requested."""

        def check(job: Job) -> bool:
            return job.attempts_made == claim.attempt and job.cancel_requested_at is not None

        change = ended_without_error(now, JobStatus.CANCELLED, message)
        return self.move_running(claim.job_id, check, change, "cancelled", now, message)
