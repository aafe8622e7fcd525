"""The memory store's moves around a job's message: the producer's insert, undo and
hand-over, a debounce's replacement, ``Tracker.retry`` and its undo, the cancel of a
waiting job, and the relay's claim and hand-over.

Each mirrors one statement of the SQL store (``store/moves.py``, ``store/rerun.py``)
with the same condition.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..core.jobs import CLAIMABLE, RETRY_UNDONE, Job, JobStatus
from ..core.keys import UndoneReplace
from ..core.moves import RetryUndo
from .memory_core import MemoryCore

_PENDING = (JobStatus.PENDING,)
_ENDED = (JobStatus.FAILED, JobStatus.CANCELLED)
_RETRIED = "retried"


def _new_message(job: Job, now: datetime) -> dict[str, Any]:
    """``rerun._NEW_MESSAGE``: the next revision, not handed over, nobody's."""
    return {
        "revision": job.revision + 1,
        "published_at": None,
        "locked_by": None,
        "locked_until": None,
        "updated_at": now,
    }


def _at_revision(revision: int) -> Any:
    def check(job: Job) -> bool:
        return job.revision == revision

    return check


def _unsent(made: int) -> Any:
    """``rerun._UNSENT``: the undone move's message was never handed over, by anyone."""

    def check(job: Job) -> bool:
        return job.revision == made and job.published_at is None and job.locked_by is None

    return check


class MemoryMessages(MemoryCore):
    """The producer's, the relay's and ``Tracker.retry``'s moves."""

    def insert(self, row: Mapping[str, Any]) -> None:
        """A pending job and its ``enqueued`` event (``DuplicateJob`` for a taken id or
        key round)."""
        with self.lock:
            job = self.add_row(row)
            assert job is not None
            self.append_event(job, "enqueued", job.created_at)

    def undo(self, job_id: str) -> bool:
        """``DELETE_UNPUBLISHED`` and its events."""
        with self.lock:
            job = self.rows.get(job_id)
            if job is None or job.status is not JobStatus.PENDING:
                return False
            if job.published_at is not None or job.locked_by is not None:
                return False
            self.drop({job_id})
            return True

    def handed_over(self, job_id: str, now: datetime, revision: int = 0) -> bool:
        """``HANDED_OVER``: any status, not yet handed over, the current revision."""

        def check(job: Job) -> bool:
            return job.published_at is None and job.revision == revision

        moved = self.move(job_id, tuple(JobStatus), check, lambda _: {"published_at": now})
        return moved is not None

    def note_handed_over(self, job_id: str, now: datetime, revision: int = 0) -> None:
        self.handed_over(job_id, now, revision)

    def republished(self, job_id: str, revision: int, refresh_s: float) -> bool:
        """``REPUBLISHED``: a waiting row handed over ``refresh_s`` ago, of the current
        revision."""

        def check(job: Job) -> bool:
            sent = job.published_at
            return sent is not None and sent < self.at(-refresh_s) and job.revision == revision

        change = lambda _: {"published_at": self.time()}  # noqa: E731
        return self.move(job_id, CLAIMABLE, check, change) is not None

    def cancel(
        self, job_id: str, *, now: datetime, reason: str, revision: int | None = None
    ) -> bool:
        """``CANCEL`` (``CANCEL_CURRENT`` with ``revision``)."""
        check = (lambda _: True) if revision is None else _at_revision(revision)
        change = {
            "status": JobStatus.CANCELLED,
            "updated_at": now,
            "locked_by": None,
            "locked_until": None,
            "not_before": None,
            "finished_at": now,
            "error_type": None,
            "error_message": reason,
        }
        moved = self.move(
            job_id, CLAIMABLE, check, lambda _: change, "cancelled", now=now, message=reason
        )
        return moved is not None

    def replace_arguments(
        self,
        job_id: str,
        *,
        seen_revision: int,
        payload_json: str,
        now: datetime,
        message: str,
        secrets_sealed: str | None = None,
        due_in_s: float | None = None,
        due_at: datetime | None = None,
    ) -> bool:
        """``REPLACE``."""

        def change(job: Job) -> Mapping[str, Any]:
            sealed: dict[str, Any] = {"secrets_sealed": secrets_sealed, "not_before": due_at}
            if due_in_s is not None:
                sealed["not_before"] = self.at(due_in_s)
            return {**_new_message(job, now), "payload_json": payload_json, **sealed}

        check = _at_revision(seen_revision)
        moved = self.move(job_id, _PENDING, check, change, "debounced", now=now, message=message)
        return moved is not None

    def undo_replace(
        self, job_id: str, made: int, undo: UndoneReplace, *, now: datetime, message: str
    ) -> bool:
        """``UNDO_REPLACE``."""
        change = {
            "payload_json": undo.payload_json,
            "secrets_sealed": undo.secrets_sealed,
            "revision": undo.revision,
            "published_at": None,
            "updated_at": now,
        }
        return self._undo(job_id, made, change, "debounce_undone", now, message)

    def _undo(
        self,
        job_id: str,
        made: int,
        change: Mapping[str, Any],
        event: str,
        now: datetime,
        message: str,
    ) -> bool:
        """An ``UNDO_*`` move: pending at revision ``made``, its message never sent."""
        check = _unsent(made)
        moved = self.move(
            job_id, _PENDING, check, lambda _: change, event, now=now, message=message
        )
        return moved is not None

    def _newer_round(self, job: Job) -> bool:
        """``rerun._NO_NEWER_ROUND`` negated (a NULL key equals nothing)."""
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
    ) -> bool:
        """``RETRY`` (``RETRY_ENDED``: from completed too): failed | cancelled → pending,
        unless a newer round holds the key."""

        def check(job: Job) -> bool:
            return job.revision == seen_revision and not self._newer_round(job)

        def change(job: Job) -> Mapping[str, Any]:
            return {
                **_new_message(job, now),
                "status": JobStatus.PENDING,
                "max_attempts": job.attempts_made + budget,
                "started_at": None,
                "finished_at": None,
                "retries_exhausted": False,
                "cancel_requested_at": None,
                "secrets_sealed": secrets_sealed,
                "payload_json": job.payload_json if payload_json is None else payload_json,
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

    # -- relay ------------------------------------------------------------------------

    def _unpublished(self, job: Job, cutoff: datetime) -> bool:
        """``statements.UNPUBLISHED``."""
        until = job.locked_until
        unheld = until is None or until < self.time()
        return job.published_at is None and job.updated_at < cutoff and unheld

    def unpublished(self, *, cutoff: datetime, now: datetime) -> list[str]:
        """``SELECT_UNPUBLISHED``: oldest first, at most 100."""
        with self.lock:
            found = [
                j
                for j in self.rows.values()
                if j.status is JobStatus.PENDING and self._unpublished(j, cutoff)
            ]
        found.sort(key=lambda j: j.created_at)
        return [j.id for j in found[:100]]

    def relay_claim(
        self, job_id: str, *, owner: str, now: datetime, lease_s: float, cutoff: datetime
    ) -> bool:
        """``RELAY_CLAIM``: no event, ``updated_at`` kept."""

        def check(job: Job) -> bool:
            return self._unpublished(job, cutoff)

        def change(_: Job) -> Mapping[str, Any]:
            return {"locked_by": owner, "locked_until": self.at(lease_s)}

        return self.move(job_id, _PENDING, check, change) is not None

    def relayed(
        self, job_id: str, *, owner: str, now: datetime, message: str, revision: int = 0
    ) -> bool:
        """``RELAYED``: the relay ``owner`` still holds it, unpublished, current."""

        def check(job: Job) -> bool:
            mine = job.locked_by == owner and job.published_at is None
            return mine and job.revision == revision

        change = {"published_at": now, "locked_by": None, "locked_until": None, "updated_at": now}
        moved = self.move(
            job_id, _PENDING, check, lambda _: change, "relayed", now=now, message=message
        )
        return moved is not None
