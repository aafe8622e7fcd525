"""The stalled-job reaper's reads and moves (``ReapStore``): rescue, abandon, its
``missing``/``found`` marks.

Each mirrors one move or read of the SQL store's ``store/reaping.py`` with the same condition
(its name in the docstring), judged on the store's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ...core.fences import StaleRun, StallCutoffs
from ...core.jobs import Event, Job, JobStatus
from .rows import MemoryCore

_RESCUED = "rescued"

_MISSING = Event.MISSING.value

_ABANDONED = "abandoned"


def _oldest(jobs: list[Job], limit: int) -> list[Job]:
    return sorted(jobs, key=lambda j: (j.created_at, j.id))[:limit]


def _abandon(retries_exhausted: bool) -> dict[str, Any]:
    """``statements.ABANDON`` (``updated_at``, ``finished_at``, the message: at the move)."""
    return {
        "status": JobStatus.FAILED,
        "locked_by": None,
        "locked_until": None,
        "not_before": None,
        "finished_at": None,
        "error_type": _ABANDONED,
        "error_message": None,
        "retries_exhausted": retries_exhausted,
    }


class MemoryReaping(MemoryCore):
    """The memory store's reaping (see the module's docstring)."""

    def _run_stalled(self, job: Job, grace_s: float, run_cutoff: datetime) -> bool:
        """``statements.RUN_STALLED``."""
        until = job.locked_until
        lapsed = until is None or until < self.at(-grace_s)
        return lapsed and (until or job.updated_at) < run_cutoff

    def _rescues(self, job_id: str) -> int:
        """``reaping.RESCUES``: rescues since the job was last retried."""
        history = self.history(job_id)
        since = max((e.id for e in history if e.event == "retried"), default=0)
        return sum(1 for e in history if e.event == _RESCUED and e.id > since)

    def stalled(self, cutoffs: StallCutoffs, limit: int) -> list[tuple[Job, int]]:
        """``SELECT_STALLED_RUNS``/``PENDING``/``_RETRYING``: the runs (at most
        ``limit``), then the oldest ``limit`` of the waiting ones."""
        grace_s, run_cutoff = cutoffs.grace_s, cutoffs.run_cutoff
        pending_cutoff, retrying_cutoff = cutoffs.pending_cutoff, cutoffs.retrying_cutoff
        with self.lock:
            jobs = list(self.rows.values())
            runs = [
                j
                for j in jobs
                if j.status is JobStatus.PROCESSING and self._run_stalled(j, grace_s, run_cutoff)
            ]
            pending = [
                j
                for j in jobs
                if j.status is JobStatus.PENDING
                and j.published_at is not None
                and j.published_at < pending_cutoff
                and (j.not_before is None or j.not_before < pending_cutoff)
                and self.free(j.not_before)
            ]
            retrying = [
                j
                for j in jobs
                if j.status is JobStatus.RETRYING
                and j.not_before is not None
                and j.not_before < retrying_cutoff
                and (j.published_at is None or j.published_at < retrying_cutoff)
            ]
            waiting = _oldest(_oldest(pending, limit) + _oldest(retrying, limit), limit)
            chosen = _oldest(runs, limit) + waiting
            return [(j, self._rescues(j.id)) for j in chosen]

    def missing_since(self, job_ids: Sequence[str]) -> dict[str, datetime]:
        """``reaping.SELECT_MISSING``: the jobs whose latest event is ``missing``."""
        found: dict[str, datetime] = {}
        for job_id in job_ids:
            history = self.history(job_id)
            if history and history[-1].event == _MISSING:
                found[job_id] = history[-1].created_at
        return found

    def note(self, job: Job, event: str, message: str, now: datetime) -> None:
        """``reaping.NOTE``: the reaper's event while the row is as judged."""

        def check(row: Job) -> bool:
            return row.revision == job.revision

        same: dict[str, Any] = {}
        self.move(job.id, (job.status,), check, lambda _: same, event, now=now, message=message)

    def _run_fence(self, seen: Job, stale: StaleRun) -> Callable[[Job], bool]:
        """``transitions._RUN_FENCE``: the row as judged, still stalled."""

        def check(job: Job) -> bool:
            return (
                self.lapsed(job, seen.attempts_made, stale.grace_s, None)
                and job.revision == seen.revision
                and self._run_stalled(job, stale.grace_s, stale.run_cutoff)
            )

        return check

    def _reap(
        self,
        seen: Job,
        check: Callable[[Job], bool],
        change: Mapping[str, Any],
        event: str,
        message: str,
        now: datetime,
    ) -> bool:
        """A reaper's move of the row ``seen``: a rescue bumps the revision; an end is
        finished at ``now`` with ``message`` as its error message."""
        values = {**change, "updated_at": now}
        if "finished_at" in values:
            values.update(finished_at=now, error_message=message)

        def changed(job: Job) -> Mapping[str, Any]:
            bump = {"revision": job.revision + 1} if event == _RESCUED else {}
            return {**values, **bump}

        moved = self.move(seen.id, (seen.status,), check, changed, event, now=now, message=message)
        return moved is not None

    def rescue_run(self, job: Job, stale: StaleRun) -> bool:
        """``RESCUE_RUN``: → retrying, due now, a new revision; attempts left."""
        fence = self._run_fence(job, stale)

        def check(row: Job) -> bool:
            left = row.attempts_made < row.max_attempts and row.cancel_requested_at is None
            return left and fence(row)

        change = {
            "status": JobStatus.RETRYING,
            "locked_by": None,
            "locked_until": None,
            "not_before": self.time(),
            "error_type": "WorkerLost",
            "error_message": stale.message,
        }
        return self._reap(job, check, change, _RESCUED, stale.message, stale.now)

    def abandon_run(self, job: Job, stale: StaleRun, retries_exhausted: bool) -> bool:
        """``ABANDON_RUN``: → failed (``abandoned``); not cancelled."""
        fence = self._run_fence(job, stale)

        def check(row: Job) -> bool:
            return row.cancel_requested_at is None and fence(row)

        abandon = _abandon(retries_exhausted)
        return self._reap(job, check, abandon, "failed", stale.message, stale.now)

    def cancel_stalled_run(self, job: Job, stale: StaleRun) -> bool:
        """``CANCEL_STALLED_RUN``: a cancel was requested."""
        fence = self._run_fence(job, stale)

        def check(row: Job) -> bool:
            return row.cancel_requested_at is not None and fence(row)

        change = {
            "status": JobStatus.CANCELLED,
            "locked_by": None,
            "locked_until": None,
            "finished_at": stale.now,
            "error_type": None,
            "error_message": stale.message,
        }
        return self._reap(job, check, change, "cancelled", stale.message, stale.now)

    def _waiting_fence(self, seen: Job, cutoff: datetime) -> Callable[[Job], bool]:
        """``_PENDING_FENCE``/``_RETRYING_FENCE``."""

        def check(job: Job) -> bool:
            since = job.published_at if seen.status is JobStatus.PENDING else job.not_before
            sent = job.published_at if seen.status is JobStatus.RETRYING else None
            again = sent is not None and sent >= cutoff  # ``REPUBLISHED`` since
            current = job.revision == seen.revision and not again
            if seen.status is JobStatus.PENDING and job.not_before is not None:
                due = job.not_before < cutoff and self.free(job.not_before)  # ``DUE``
                current = current and due
            return current and since is not None and since < cutoff

        return check

    def rescue_waiting(self, job: Job, *, cutoff: datetime, message: str, now: datetime) -> bool:
        """``RESCUE_PENDING``/``RESCUE_RETRYING``: a new revision."""
        if job.status is JobStatus.PENDING:
            change: dict[str, Any] = {"locked_by": None, "locked_until": None}
            change["published_at"] = None
        else:
            change = {"locked_by": None, "not_before": self.time()}
        return self._reap(job, self._waiting_fence(job, cutoff), change, _RESCUED, message, now)

    def abandon_waiting(
        self, job: Job, *, cutoff: datetime, message: str, now: datetime, retries_exhausted: bool
    ) -> bool:
        """``ABANDON_PENDING``/``ABANDON_RETRYING``."""
        fence = self._waiting_fence(job, cutoff)
        return self._reap(job, fence, _abandon(retries_exhausted), "failed", message, now)
