"""The allowed moves of a job row, each one conditional ``UPDATE`` run by :meth:`Moves.apply`.

A move returns the moved row's ``(attempts_made, max_attempts)``, or ``None`` when the row
was not in a state the move allows (another run holds it, it ended, it is gone): the
caller decides what that means. Nothing here reads a row to decide a write. Here: the
producer's moves, claims and takeovers, leases and cancels; how a run ends is in
``outcomes.py``, a job's new message in ``rerun.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert

from ..core.jobs import Claim, JobStatus, NewRow
from ..core.moves import Lease, Takeover
from . import inserts, selects
from . import statements as sql
from .engines import Engines
from .models import jobs, metadata
from .slots import key_locked
from .translate import Disconnected, DuplicateJob, reconnecting, translated

Moved = tuple[int, int]


class Moves:
    """The write side of :class:`~celery_tracked.store.JobStore`."""

    engines: Engines

    def apply(
        self,
        move: sql.Move,
        params: Mapping[str, Any],
        rows: Sequence[NewRow] = (),
        key: str | None = None,
    ) -> Moved | None:
        """Run ``move`` and its history row atomically, plus ``rows`` if it applied;
        under the lock of concurrency key ``key`` when given (``slots.py``).

        One statement on PostgreSQL (a CTE; through the fast path when no rows are joined
        and no key is locked), a short transaction elsewhere.
        """
        engines = self.engines.get()
        with translated(f"{move.name.replace('_', ' ')} of the job"):
            fastpath = None if rows or key is not None else engines.fastpath
            if engines.is_postgres and fastpath is not None:
                found = fastpath.execute(move.name, lambda: sql.move_cte(move), params)
                return None if found is None else (int(found[0]), int(found[1]))
            locked = key_locked(engines, key) if key is not None else engines.transaction()
            with locked as conn:
                found = self.apply_in(conn, move, params, engines.is_postgres)
                if found is not None:
                    insert_rows(conn, rows)
                return found

    @staticmethod
    def apply_in(
        conn: Connection, move: sql.Move, params: Mapping[str, Any], postgres: bool
    ) -> Moved | None:
        values = dict(params)
        if postgres:
            row = conn.execute(sql.move_cte(move), values).first()
        else:
            if conn.execute(sql.move_update(move), values).rowcount != 1:
                return None
            row = conn.execute(selects.SELECT_ATTEMPTS, values).first()
            if move.event is not None:
                conn.execute(sql.event_insert(jobs, move.event, move.target), values)
        return None if row is None else (int(row[0]), int(row[1]))

    # -- producer ---------------------------------------------------------------------

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
        return self.apply(sql.HANDED_OVER, params) is not None

    def republished(self, job_id: str, revision: int, refresh_s: float) -> bool:
        """A postponed delivery of the waiting job's message of ``revision`` handed it to
        the broker again: ``published_at`` is now (the database's clock), if it was
        older than ``refresh_s``."""
        params = {"job_id": job_id, "at_revision": revision, "refresh_s": refresh_s}
        return self.apply(sql.REPUBLISHED, params) is not None

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
                sql.HANDED_OVER.name, lambda: sql.move_cte(sql.HANDED_OVER), params
            )

    # -- worker -----------------------------------------------------------------------

    @reconnecting
    def claim(self, job_id: str, lease: Lease) -> Claim | None:
        """pending | retrying (its backoff due) → processing, taking the lease for
        ``lease.lease_s`` seconds of the database's clock, for a delivery of the job's
        current message ``lease.revision``; with ``lease.concurrency`` (key, limit) only
        while the key has a free slot. None if not claimable."""
        moved = self._lease(sql.CLAIM, sql.CLAIM_KEYED, {"job_id": job_id}, lease)
        return None if moved is None else Claim(job_id, moved[0], moved[1])

    @reconnecting
    def take_over(self, job_id: str, lease: Lease, fence: Takeover) -> Claim | None:
        """processing → processing for a new attempt, when the old lease expired more than
        ``fence.grace_s`` ago (the database's clock) or its owner is known dead. Fenced by
        the attempt number last seen; with ``lease.concurrency`` like ``claim``."""
        params = {"job_id": job_id, "attempt": fence.seen_attempt, "grace_s": fence.grace_s}
        params.update(stale_owner=fence.stale_owner, message=fence.reason)
        moved = self._lease(sql.TAKE_OVER, sql.TAKE_OVER_KEYED, params, lease)
        return None if moved is None else Claim(job_id, moved[0], moved[1], takeover=True)

    def _lease(
        self, move: sql.Move, keyed: sql.Move, params: dict[str, Any], lease: Lease
    ) -> Moved | None:
        """``move`` taking ``lease`` (``keyed`` under its concurrency key's lock)."""
        params.update(owner=lease.owner, worker_name=lease.worker, now=lease.now)
        params.update(lease_s=lease.lease_s, at_revision=lease.revision)
        key = None
        if lease.concurrency is not None:
            move, key = keyed, lease.concurrency[0]
            params.update(limited_key=key, concurrency_limit=lease.concurrency[1])
        return self.apply(move, params, key=key)

    @reconnecting
    def cancel(
        self, job_id: str, *, now: datetime, reason: str, revision: int | None = None
    ) -> bool:
        """pending | retrying → cancelled (with ``revision``: only while the job's message
        is that one). A running job is never interrupted."""
        params: dict[str, Any] = {"job_id": job_id, "now": now, "message": reason}
        if revision is None:
            return self.apply(sql.CANCEL, params) is not None
        return self.apply(sql.CANCEL_CURRENT, {**params, "at_revision": revision}) is not None

    @reconnecting
    def renew(self, claim: Claim, lease_seconds: float) -> bool:
        """Extend a running attempt's lease to ``lease_seconds`` from now (the database's
        clock); False when it no longer holds it."""
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "lease_s": lease_seconds}
        return self.apply(sql.RENEW, params) is not None

    @reconnecting
    def release(self, claim: Claim, now: datetime) -> bool:
        """Drop the lease of an abandoned attempt, so a redelivery takes over at once."""
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "now": now}
        return self.apply(sql.RELEASE, params) is not None


def insert_rows(conn: Connection, rows: Sequence[NewRow]) -> None:
    for row in rows:
        if not row.new_job:
            conn.execute(insert(metadata.tables[row.table]).values(dict(row.values)))
            continue
        params = {**inserts.NEW_JOB_DEFAULTS, **row.values}
        conn.execute(inserts.job_insert_if_absent(conn.dialect.name), params)
        # copied from the row: none when the insert was skipped (a new job's id is fresh)
        event = sql.event_insert(jobs, "enqueued", JobStatus.PENDING)
        values = {"job_id": params["id"], "now": params["created_at"], "message": row.message}
        conn.execute(event, values)
