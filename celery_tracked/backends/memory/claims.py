"""A delivery's claim (``ClaimStore``): claim, take over, a lost last attempt, a claim
given back, a postponed delivery's refresh, a concurrency key's reads.

Each mirrors one move or read of the SQL store's ``store/claims.py`` with the same condition
(its name in the docstring), judged on the store's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ...core.deadlines import DEADLINE_EXCEEDED
from ...core.fences import Lease, Takeover
from ...core.jobs import CLAIMABLE, Claim, Job, JobStatus
from ...core.limits import SLOT_HANDED
from .rows import PROCESSING, MemoryCore, end_run


class MemoryClaims(MemoryCore):
    """The memory store's claims (see the module's docstring)."""

    def holders(self, key: str, job_id: str) -> int:
        """``statements.HOLDERS``: other jobs of ``key`` processing under a live lease, or
        waiting with a slot handed to them, until it lapses."""
        now = self.time()
        handed = (JobStatus.PENDING, JobStatus.RETRYING)
        return sum(
            1
            for j in self.rows.values()
            if j.concurrency_key == key
            and (
                j.status is JobStatus.PROCESSING
                or (j.status in handed and j.locked_by == SLOT_HANDED)
            )
            and j.locked_until is not None
            and j.locked_until > now
            and j.id != job_id
        )

    def key_busy(self, job_id: str, key: str, limit: int) -> bool:
        with self.lock:
            return limit <= self.holders(key, job_id)

    def key_waiting(self, key: str) -> int:
        """``claims.KEY_WAITING``."""
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
        """``CLAIM`` (``CLAIM_KEYED``): due, unlocked (keyed: or handed a slot), the current
        revision, a free slot."""

        def check(job: Job) -> bool:
            handed = lease.concurrency is not None and job.locked_by == SLOT_HANDED
            due = self.due_to_claim(job.not_before) and (self.free(job.locked_until) or handed)
            due = due and (job.deadline_at is None or job.deadline_at > self.time())  # ``ALIVE``
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
                and (job.deadline_at is None or job.deadline_at > self.time())  # ``ALIVE``
                and self._key_free(job_id, lease.concurrency)
            )

        change = self._take_lease(lease)
        moved = self.move(
            job_id, PROCESSING, check, change, "redelivered", now=lease.now, message=fence.reason
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
        change = end_run(
            now,
            status=JobStatus.FAILED,
            retries_exhausted=True,
            error_type="WorkerLost",
            error_message=message,
            finished_at=now,
        )
        return self.move_running(job_id, check, change, "failed", now, message)

    def give_back(
        self, claim: Claim, *, owner: str, claimed_at: datetime, now: datetime, message: str
    ) -> bool:
        """``GIVE_BACK`` (``_TAKEOVER``): fenced by the claim's attempt and owner."""

        def check(job: Job) -> bool:
            return job.attempts_made == claim.attempt and job.locked_by == owner

        def change(job: Job) -> Mapping[str, Any]:
            back = end_run(now, attempts_made=job.attempts_made - 1)
            if claim.takeover:
                return back
            if job.started_at == claimed_at:  # this very claim started it: it was pending
                return {**back, "status": JobStatus.PENDING, "worker": None, "started_at": None}
            return {**back, "status": JobStatus.RETRYING}

        moved = self.move(
            claim.job_id, PROCESSING, check, change, "given_back", now=now, message=message
        )
        return moved is not None

    def expire(self, job_id: str, *, now: datetime, message: str) -> bool:
        """``EXPIRE``: its deadline came on the store's clock."""

        def check(job: Job) -> bool:
            return job.deadline_at is not None and job.deadline_at <= self.time()

        change = end_run(
            now,
            status=JobStatus.CANCELLED,
            not_before=None,
            finished_at=now,
            error_type=DEADLINE_EXCEEDED,
            error_message=message,
        )
        moved = self.move(
            job_id, CLAIMABLE, check, lambda _: change, "cancelled", now=now, message=message
        )
        return moved is not None

    def republished(self, job_id: str, revision: int, refresh_s: float) -> bool:
        """``REPUBLISHED``: a waiting row handed over ``refresh_s`` ago, of the current
        revision."""

        def check(job: Job) -> bool:
            sent = job.published_at
            return sent is not None and sent < self.at(-refresh_s) and job.revision == revision

        change = lambda _: {"published_at": self.time()}  # noqa: E731
        return self.move(job_id, CLAIMABLE, check, change) is not None
