"""The read side of the store: one job, a job by key, a job's history, queue statistics."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection

from ..core.cleanup import ENDED
from ..core.jobs import Job, JobEvent, JobStatus
from . import selects
from .engines import Engines
from .translate import reconnecting, translated

#: PostgreSQL tables estimated at this many rows or more get estimated ended counts.
ESTIMATE_ABOVE = 1_000_000
#: About this many rows are sampled for the estimate (1 % of 10M rows).
SAMPLE_ROWS = 100_000
#: Ended groups estimated under this many rows are counted exactly...
EXACT_BELOW = 100_000
#: ...while the rows so counted (as estimated) stay under this many per call.
EXACT_BUDGET = 1_000_000


class Reads:
    """The read side of :class:`~celery_tracked.store.JobStore`."""

    engines: Engines

    @reconnecting
    def get(self, job_id: str) -> Job | None:
        with translated("reading the job"), self.engines.transaction() as conn:
            row = conn.execute(selects.SELECT_JOB, {"job_id": job_id}).mappings().first()
        return None if row is None else Job.from_row(row)

    @reconnecting
    def clock(self) -> datetime:
        """The database's current time: the clock leases are judged on."""
        with translated("reading the database clock"):
            row = self.engines.execute(selects.SELECT_CLOCK, {})
        assert row is not None
        return row[0]  # type: ignore[no-any-return]

    @reconnecting
    def find_by_key(self, job_type: str, key: str) -> Job | None:
        params = {"job_type": job_type, "idempotency_key": key}
        with translated("reading the job"), self.engines.transaction() as conn:
            row = conn.execute(selects.SELECT_BY_KEY, params).mappings().first()
        return None if row is None else Job.from_row(row)

    @reconnecting
    def pipeline(self, correlation_id: str) -> list[Job]:
        """The jobs sharing ``correlation_id``, oldest first."""
        params = {"correlation_id": correlation_id}
        with translated("reading the pipeline"), self.engines.transaction() as conn:
            rows = conn.execute(selects.SELECT_PIPELINE, params).mappings().all()
        return [Job.from_row(r) for r in rows]

    @reconnecting
    def unpublished(self, *, cutoff: datetime, now: datetime) -> list[str]:
        """Ids of pending jobs created before ``cutoff`` whose message was never handed to
        the broker and that no relay holds (oldest first, at most 100)."""
        params = {"cutoff": cutoff, "now": now}
        with translated("reading unpublished jobs"), self.engines.transaction() as conn:
            return [str(r[0]) for r in conn.execute(selects.SELECT_UNPUBLISHED, params).all()]

    @reconnecting
    def events(self, job_id: str) -> list[JobEvent]:
        with translated("reading the job history"), self.engines.transaction() as conn:
            rows = conn.execute(selects.SELECT_EVENTS, {"job_id": job_id}).mappings().all()
        return [JobEvent.from_row(r) for r in rows]

    @reconnecting
    def stats(self, now: datetime | None = None) -> dict[str, dict[str, Any]]:
        """Counts per queue and status, and the age of the oldest pending job per queue.

        Exact, except on PostgreSQL for a table the planner estimates at
        :data:`ESTIMATE_ABOVE` rows or more: there the ended statuses' counts are
        estimated from a block sample (the active ones stay exact; see
        :meth:`_counts`)."""
        now = now or self.clock()  # the database's: created_at is not this host's
        with translated("reading queue statistics"), self.engines.transaction() as conn:
            count_rows = self._counts(conn)
            oldest_rows = conn.execute(selects.OLDEST_PENDING).all()
        out: dict[str, dict[str, Any]] = {}
        for queue, status, n in count_rows:
            entry = out.setdefault(queue, _empty_stats())
            entry["counts"][status] = n
            entry["total"] += n
        for queue, created in oldest_rows:
            if created is None:
                continue
            if created.tzinfo is None:
                created = created.replace(tzinfo=timezone.utc)
            out.setdefault(queue, _empty_stats())["oldest_pending_age_s"] = max(
                0.0, (now - created).total_seconds()
            )
        return out

    def _counts(self, conn: Connection) -> list[tuple[str, str, int]]:
        """``(queue, status, count)`` rows: an exact ``GROUP BY`` reads every row (an
        index-only scan: ~0.2 s per million rows here, more with several cores busy), so
        a big PostgreSQL table is counted by :func:`_big_table_counts` instead."""
        estimated = -1.0
        if self.engines.is_postgres:
            estimated = float(conn.execute(selects.ESTIMATED_ROWS).scalar() or -1)
        if estimated < ESTIMATE_ABOVE:
            return [(q, s, int(n)) for q, s, n in conn.execute(selects.COUNT_BY_STATUS)]
        return _big_table_counts(conn, estimated)


def _big_table_counts(conn: Connection, estimated: float) -> list[tuple[str, str, int]]:
    """Counts that read a bounded number of rows, without anything maintained on the hot
    path: the active statuses exactly (from their index); every ``(queue, status)``
    group present found by a loose index scan; each ended group estimated from a block
    sample of ~:data:`SAMPLE_ROWS` rows scaled to the planner's row estimate, except
    that the groups estimated under :data:`EXACT_BELOW` rows (where a sample's relative
    error is large) are counted exactly, smallest first, while their estimates sum to
    less than :data:`EXACT_BUDGET` rows. So small and rare groups are exact and never
    missing; only big ended groups are estimates (within a few percent)."""
    rows = [(q, s, int(n)) for q, s, n in conn.execute(selects.COUNT_ACTIVE_BY_STATUS)]
    percent = min(100.0, 100.0 * SAMPLE_ROWS / estimated)
    sample: dict[tuple[str, str], float] = {}
    for queue, status, n, sampled in conn.execute(
        selects.SAMPLE_ENDED_BY_STATUS, {"percent": percent}
    ):
        sample[(queue, status)] = n * estimated / int(sampled)
    ended = [(q, s) for q, s in conn.execute(selects.GROUPS) if s in ENDED]
    budget = float(EXACT_BUDGET)
    for queue, status in sorted(ended, key=lambda group: sample.get(group, 0.0)):
        guess = sample.get((queue, status), 0.0)
        if guess < EXACT_BELOW and guess < budget:
            budget -= guess
            params = {"queue_name": queue, "status": status}
            rows.append(
                (queue, status, int(conn.execute(selects.COUNT_GROUP, params).scalar_one()))
            )
        else:
            rows.append((queue, status, max(1, round(guess))))
    return rows


def _empty_stats() -> dict[str, Any]:
    return {"counts": {s.value: 0 for s in JobStatus}, "total": 0, "oldest_pending_age_s": None}
