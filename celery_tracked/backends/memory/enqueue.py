"""The producer's moves (``EnqueueStore``, ``Handing``): the insert, the undo of a failed
enqueue, the hand-over mark, a debounce's replacement and its undo.

Each mirrors one move or read of the SQL store's ``store/enqueue.py`` with the same condition
(its name in the docstring), judged on the store's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ...core.jobs import Job, JobStatus
from ...core.keys import UndoneReplace
from .rows import PENDING, MemoryCore, at_revision, new_message


class MemoryEnqueue(MemoryCore):
    """The memory store's enqueue (see the module's docstring)."""

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
            due = self.due_time(due_in_s, due_at)
            sealed: dict[str, Any] = {"secrets_sealed": secrets_sealed, "not_before": due}
            return {**new_message(job, now), "payload_json": payload_json, **sealed}

        check = at_revision(seen_revision)
        moved = self.move(job_id, PENDING, check, change, "debounced", now=now, message=message)
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
