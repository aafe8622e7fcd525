"""``Tracker.retry`` and ``Tracker.cancel`` (``RerunStore``): a retry and its undo, the cancel
of a waiting job, the cancel request on a running one, a job's rounds, a fail-soft
successor.

Each mirrors one move or read of the SQL store's ``store/rerun.py`` with the same condition
(its name in the docstring), judged on the store's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ...core.deadlines import Deadline
from ...core.fences import RetryUndo
from ...core.jobs import CLAIMABLE, RETRY_UNDONE, Job, JobStatus
from .rows import MemoryCore, at_revision, new_message

_ENDED = (JobStatus.FAILED, JobStatus.CANCELLED)

_RETRIED = "retried"


class MemoryRerun(MemoryCore):
    """The memory store's rerun (see the module's docstring)."""

    def cancel(
        self,
        job_id: str,
        *,
        now: datetime,
        reason: str,
        revision: int | None = None,
        error_type: str | None = None,
    ) -> bool:
        """``CANCEL`` (``CANCEL_CURRENT`` with ``revision``)."""
        check = (lambda _: True) if revision is None else at_revision(revision)
        change = {
            "status": JobStatus.CANCELLED,
            "updated_at": now,
            "locked_by": None,
            "locked_until": None,
            "not_before": None,
            "finished_at": now,
            "error_type": error_type,
            "error_message": reason,
        }
        moved = self.move(
            job_id, CLAIMABLE, check, lambda _: change, "cancelled", now=now, message=reason
        )
        return moved is not None

    def _newer_round(self, job: Job) -> bool:
        """``statements.NO_NEWER_ROUND`` negated (a NULL key equals nothing)."""
        if job.idempotency_key is None:
            return False
        return any(
            o.job_type == job.job_type
            and o.idempotency_key == job.idempotency_key
            and o.key_round > job.key_round
            for o in self.rows.values()
        )

    def retry(
        self,
        job_id: str,
        *,
        seen_revision: int,
        budget: int,
        now: datetime,
        message: str,
        secrets_sealed: str | None = None,
        payload_json: str | None = None,
        completed_too: bool = False,
        due_in_s: float | None = None,
        due_at: datetime | None = None,
        deadline: Deadline | None = None,
    ) -> bool:
        """``RETRY`` (``RETRY_ENDED``: from completed too): failed | cancelled → pending,
        unless a newer round holds the key; due when its message is."""

        def check(job: Job) -> bool:
            return job.revision == seen_revision and not self._newer_round(job)

        def change(job: Job) -> Mapping[str, Any]:
            return {
                **new_message(job, now),
                "status": JobStatus.PENDING,
                "max_attempts": job.attempts_made + budget,
                "started_at": None,
                "finished_at": None,
                "retries_exhausted": False,
                "cancel_requested_at": None,
                "secrets_sealed": secrets_sealed,
                "payload_json": job.payload_json if payload_json is None else payload_json,
                "not_before": self.due_time(due_in_s, due_at),
                "deadline_at": job.deadline_at
                if deadline is None
                else self.due_time(deadline.in_s, deadline.at),
            }

        sources = (JobStatus.COMPLETED, *_ENDED) if completed_too else _ENDED
        moved = self.move(job_id, sources, check, change, _RETRIED, now=now, message=message)
        return moved is not None

    def undo_retry(self, job_id: str, undo: RetryUndo, *, now: datetime, message: str) -> bool:
        """``UNDO_RETRY``: back to ``undo.status`` (completed, failed or cancelled)."""
        if undo.status not in (JobStatus.COMPLETED, *_ENDED):
            raise KeyError(undo.status)
        change: dict[str, Any] = {
            "status": undo.status,
            "max_attempts": undo.max_attempts,
            "finished_at": undo.finished_at,
            "retries_exhausted": undo.retries_exhausted,
            "secrets_sealed": undo.secrets_sealed,
            "deadline_at": undo.deadline_at,
            "updated_at": now,
        }
        if undo.payload_json is not None:
            change["payload_json"] = undo.payload_json
        return self._undo(job_id, undo.made, change, RETRY_UNDONE, now, message)

    def retry_rounds(self, job_id: str) -> list[tuple[str, int]]:
        """``SELECT_ROUNDS``."""
        wanted = (_RETRIED, RETRY_UNDONE)
        return [(e.event, e.attempt) for e in self.history(job_id) if e.event in wanted]

    def fail_soft_successor(self, step: Job, note: str) -> Job | None:
        """``SELECT_FAIL_SOFT``: the oldest job of the step's pipeline whose parent is the
        step and whose ``enqueued`` event says ``note``."""
        pipeline = step.correlation_id or step.id
        with self.lock:
            found = [
                job
                for job in self.rows.values()
                if job.correlation_id == pipeline
                and job.parent_job_id == step.id
                and any(e.event == "enqueued" and e.message == note for e in self.history(job.id))
            ]
        return min(found, key=lambda j: j.created_at, default=None)

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
