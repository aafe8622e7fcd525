"""The read side of the store: one job, a job by key, a job's history, queue statistics."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..core.jobs import Job, JobEvent, JobStatus, utcnow
from . import selects
from .engines import Engines
from .translate import reconnecting, translated


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
        """Counts per queue and status, and the age of the oldest pending job per queue."""
        now = now or utcnow()
        with translated("reading queue statistics"), self.engines.transaction() as conn:
            count_rows = conn.execute(selects.COUNT_BY_STATUS).all()
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


def _empty_stats() -> dict[str, Any]:
    return {"counts": {s.value: 0 for s in JobStatus}, "total": 0, "oldest_pending_age_s": None}
