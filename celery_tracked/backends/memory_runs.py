"""The memory store's moves of a run: claim, take over, the outcomes, give back, renew,
release, the cancels of a running job, progress and log lines.

Each mirrors one statement of the SQL store (named in its docstring) with the same
condition: the statuses it moves from and its fence, judged on the store's clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..core.jobs import CLAIMABLE, Claim, Job, JobStatus, NewRow
from ..core.moves import AttemptError, Completion, DeadRun, Lease, Rows, Takeover
from .memory_core import MemoryCore

_PROCESSING = (JobStatus.PROCESSING,)
#: ``statements._END_RUN``
_UNLOCKED: dict[str, Any] = {"locked_by": None, "locked_until": None}


def _end_run(now: datetime, **changes: Any) -> dict[str, Any]:
    return {"updated_at": now, **_UNLOCKED, **changes}


def ended_without_error(
    now: datetime, status: JobStatus, message: str | None, **changes: Any
) -> dict[str, Any]:
    """A run ended completed or cancelled: finished now, no error type."""
    return _end_run(
        now, status=status, finished_at=now, error_type=None, error_message=message, **changes
    )


class MemoryRuns(MemoryCore):
    """A delivery's claim and its run's writes."""

    def holders(self, key: str, job_id: str) -> int:
        """``statements.HOLDERS``: other jobs of ``key`` processing under a live lease."""
        now = self.time()
        return sum(
            1
            for j in self.rows.values()
            if j.concurrency_key == key
            and j.status is JobStatus.PROCESSING
            and j.locked_until is not None
            and j.locked_until > now
            and j.id != job_id
        )

    def key_busy(self, job_id: str, key: str, limit: int) -> bool:
        with self.lock:
            return limit <= self.holders(key, job_id)

    def key_waiting(self, key: str) -> int:
        """``slots.KEY_WAITING``."""
        waiting = (JobStatus.PENDING, JobStatus.RETRYING)
        with self.lock:
            return sum(
                1 for j in self.rows.values() if j.concurrency_key == key and j.status in waiting
            )

    def _take_lease(self, lease: Lease) -> Any:
        now = lease.now

        def change(job: Job) -> Mapping[str, Any]:
            return {
                "status": JobStatus.PROCESSING,
                "attempts_made": job.attempts_made + 1,
                "started_at": job.started_at or now,
                "worker": lease.worker,
                "locked_by": lease.owner,
                "locked_until": self.at(lease.lease_s),
                "not_before": None,
                "updated_at": now,
            }

        return change

    def _key_free(self, job_id: str, concurrency: tuple[str, int] | None) -> bool:
        return concurrency is None or concurrency[1] > self.holders(concurrency[0], job_id)

    def claim(self, job_id: str, lease: Lease) -> Claim | None:
        """``CLAIM`` (``CLAIM_KEYED``): due, unlocked, the current revision, a free slot."""

        def check(job: Job) -> bool:
            due = self.free(job.not_before) and self.free(job.locked_until)
            current = job.revision == lease.revision
            return due and current and self._key_free(job_id, lease.concurrency)

        change = self._take_lease(lease)
        moved = self.move(job_id, CLAIMABLE, check, change, "started", now=lease.now)
        return None if moved is None else Claim(job_id, moved.attempts_made, moved.max_attempts)

    def take_over(self, job_id: str, lease: Lease, fence: Takeover) -> Claim | None:
        """``TAKE_OVER`` (``_KEYED``): lapsed, attempts left, current, not cancelled."""

        def check(job: Job) -> bool:
            return (
                self.lapsed(job, fence.seen_attempt, fence.grace_s, fence.stale_owner)
                and job.attempts_made < job.max_attempts
                and job.revision == lease.revision
                and job.cancel_requested_at is None
                and self._key_free(job_id, lease.concurrency)
            )

        change = self._take_lease(lease)
        moved = self.move(
            job_id, _PROCESSING, check, change, "redelivered", now=lease.now, message=fence.reason
        )
        if moved is None:
            return None
        return Claim(job_id, moved.attempts_made, moved.max_attempts, takeover=True)

    def fail_lost(self, job_id: str, fence: Takeover, now: datetime) -> bool:
        """``FAIL_LOST``: fenced like a takeover, not cancelled."""

        def check(job: Job) -> bool:
            lapsed = self.lapsed(job, fence.seen_attempt, fence.grace_s, fence.stale_owner)
            return lapsed and job.cancel_requested_at is None

        message = fence.reason
        change = _end_run(
            now,
            status=JobStatus.FAILED,
            retries_exhausted=True,
            error_type="WorkerLost",
            error_message=message,
            finished_at=now,
        )
        return self.move_running(job_id, check, change, "failed", now, message)

    def end_dead_run(self, job_id: str, dead: DeadRun) -> bool:
        """``RETRY_DEAD``/``FAIL_DEAD``/``CANCEL_DEAD``: lapsed (no grace); the first two
        only while no cancel was requested."""
        status, now = dead.status, dead.now
        cancelling = status is JobStatus.CANCELLED

        def check(job: Job) -> bool:
            lapsed = self.lapsed(job, dead.seen_attempt, 0.0, dead.stale_owner)
            return lapsed and (cancelling or job.cancel_requested_at is None)

        error = {"error_type": dead.error_type, "error_message": dead.error_message}
        ended = _end_run(now, status=status, **error)
        if status is JobStatus.RETRYING:
            ended["not_before"] = self.at(dead.delay_ms / 1000)
        else:
            ended["finished_at"] = now
        if status is JobStatus.FAILED:
            ended["retries_exhausted"] = True
        if cancelling:
            ended.update(error_type=None, error_message=dead.message)
        return self.move_running(job_id, check, ended, status.value, now, dead.message)

    def move_running(
        self,
        job_id: str,
        check: Any,
        change: Mapping[str, Any],
        event: str | None,
        now: datetime,
        message: str | None = None,
        duration_ms: int | None = None,
        rows: Sequence[NewRow] = (),
    ) -> bool:
        """A move from ``processing`` with fixed ``change``: whether it applied."""
        moved = self.move(
            job_id,
            _PROCESSING,
            check,
            lambda _: change,
            event,
            now=now,
            message=message,
            duration_ms=duration_ms,
            rows=rows,
        )
        return moved is not None

    def held_by(self, claim: Claim, uncancelled: bool = True) -> Any:
        """``HELD`` (and ``UNCANCELLED``)."""

        def check(job: Job) -> bool:
            held = job.attempts_made == claim.attempt
            return held and (not uncancelled or job.cancel_requested_at is None)

        return check

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
        message = f"{error.error_type}: {error.error_message}"
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
        change = {**_end_run(now, status=status, **failed), **extra}
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
        return self.move_running(claim.job_id, self.held_by(claim, False), _end_run(now), None, now)

    def give_back(
        self, claim: Claim, *, owner: str, claimed_at: datetime, now: datetime, message: str
    ) -> bool:
        """``GIVE_BACK`` (``_TAKEOVER``): fenced by the claim's attempt and owner."""

        def check(job: Job) -> bool:
            return job.attempts_made == claim.attempt and job.locked_by == owner

        def change(job: Job) -> Mapping[str, Any]:
            back = _end_run(now, attempts_made=job.attempts_made - 1)
            if claim.takeover:
                return back
            if job.started_at == claimed_at:  # this very claim started it: it was pending
                return {**back, "status": JobStatus.PENDING, "worker": None, "started_at": None}
            return {**back, "status": JobStatus.RETRYING}

        moved = self.move(
            claim.job_id, _PROCESSING, check, change, "given_back", now=now, message=message
        )
        return moved is not None
