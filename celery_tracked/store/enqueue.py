"""The producer's side of the store (``EnqueueStore``, ``Handing``): a job's row and its
``enqueued`` event, the undo of an enqueue whose publish failed, the mark that its message
was handed to the broker, and a debounce's replacement of a pending job's arguments (and
its undo).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..core.jobs import JobStatus
from ..core.keys import UndoneReplace
from . import inserts, selects
from . import statements as sql
from . import transitions as moves
from .engines import Applying
from .models import jobs
from .translate import Disconnected, DuplicateJob, reconnecting, translated


class Enqueue(Applying):
    """The producer's side of :class:`~celery_tracked.store.JobStore`."""

    def insert(self, row: Mapping[str, Any]) -> None:
        """Insert a pending job and its ``enqueued`` event, committed.

        A dead pooled connection gets one re-send on a fresh one; if that re-send finds
        this very row (same id and ``created_at``), the first send had committed.

        Raises:
            DuplicateJob: the id or ``(job_type, idempotency_key)`` already exists.
            StoreError: the database failed.
        """
        params = {**inserts.NEW_JOB_DEFAULTS, **row, "now": row["created_at"]}
        try:
            self._insert(params)
        except Disconnected:
            try:
                self._insert(params)
            except DuplicateJob:
                with translated("reading the job"):
                    mine = self.engines.execute(selects.SELECT_JOB, {"job_id": row["id"]})
                if mine is None or mine.created_at != row["created_at"]:
                    raise
                # the first send committed, its reply was lost: the row is ours

    def _insert(self, params: Mapping[str, Any]) -> None:
        engines = self.engines.get()
        with translated("inserting the job row", inserting=True):
            if engines.is_postgres and engines.fastpath is not None:
                engines.fastpath.execute("insert", inserts.job_insert_cte, params)
                return
            with engines.transaction() as conn:
                if engines.is_postgres:
                    conn.execute(inserts.job_insert_cte(), dict(params))
                    return
                conn.execute(inserts.JOB_INSERT, dict(params))
                event = sql.event_insert(jobs, "enqueued", JobStatus.PENDING)
                conn.execute(event, {"job_id": params["id"], "now": params["created_at"]})

    @reconnecting
    def undo(self, job_id: str) -> bool:
        """Remove a job whose publish failed, with its history, unless a relay handed its
        message over meanwhile (then the job stays, and will run): True if removed.

        Committed durably (PostgreSQL: ``synchronous_commit=on`` for this transaction): the
        caller is told no job exists, so a server crash must not bring the row back for
        the relay to run."""
        with translated("deleting the job row"), self.engines.transaction() as conn:
            if self.engines.is_postgres:
                conn.execute(sql.commit_mode(True))
            if conn.execute(selects.DELETE_UNPUBLISHED, {"job_id": job_id}).rowcount != 1:
                return False
            conn.execute(selects.DELETE_EVENTS, {"job_id": job_id})
            return True

    @reconnecting
    def handed_over(self, job_id: str, now: datetime, revision: int = 0) -> bool:
        """Record that the job's message of ``revision`` was handed to the broker (if not
        yet recorded, and no newer message replaced it)."""
        params = {"job_id": job_id, "now": now, "at_revision": revision}
        return self.apply(moves.HANDED_OVER, params) is not None

    def note_handed_over(self, job_id: str, now: datetime, revision: int = 0) -> None:
        """``handed_over`` without waiting for the answer where the store can: on
        PostgreSQL's fast path the statement is sent and its answer read before this
        thread's next statement (a failure is logged then); elsewhere it is
        ``handed_over``. A lost mark only lets the relay send a harmless duplicate."""
        engines = self.engines.get()
        if not engines.is_postgres or engines.fastpath is None:
            self.handed_over(job_id, now, revision)
            return
        params = {"job_id": job_id, "now": now, "at_revision": revision}
        with translated("recording the publish of the job"):
            engines.fastpath.send(
                moves.HANDED_OVER.name, lambda: sql.move_cte(moves.HANDED_OVER), params
            )

    @reconnecting
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
        """pending → pending with new arguments and revision ``seen_revision + 1``, if the
        job is still pending at ``seen_revision``; due when its new message is (``due_in_s``
        from now on the database's clock, or at ``due_at``; neither: at once)."""
        params = {"job_id": job_id, "at_revision": seen_revision, "payload_json": payload_json}
        params.update(now=now, message=message, secrets_sealed=secrets_sealed)
        params.update(due_in_s=due_in_s, due_at=due_at)
        return self.apply(moves.REPLACE, params) is not None

    @reconnecting
    def undo_replace(
        self, job_id: str, made: int, undo: UndoneReplace, *, now: datetime, message: str
    ) -> bool:
        """pending at revision ``made`` → pending at ``undo.revision`` (newer) with
        ``undo.payload_json`` and no message handed over (the relay's), if nobody handed
        ``made`` over."""
        params = {"job_id": job_id, "made": made, "at_revision": undo.revision, "now": now}
        params.update(payload_json=undo.payload_json, message=message)
        params.update(secrets_sealed=undo.secrets_sealed)
        return self.apply(moves.UNDO_REPLACE, params) is not None
