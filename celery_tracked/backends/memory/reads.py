"""The reads (``Reader``, ``KeyReader``, ``ReadStore``): one job, by key, a pipeline, a
history, listings, statistics, gauges.

Each mirrors one move or read of the SQL store's ``store/reads.py`` with the same condition
(its name in the docstring), judged on the store's clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...core.finder import JobFilter, Position
from ...core.jobs import Job, JobEvent, JobStatus, utcnow
from ...core.throughput import EndedRun
from .rows import MemoryCore


def _empty_stats() -> dict[str, Any]:
    return {
        "counts": {s.value: 0 for s in JobStatus},
        "total": 0,
        "oldest_pending_age_s": None,
        "scheduled": 0,
    }


class MemoryReads(MemoryCore):
    """The memory store's reads (see the module's docstring)."""

    def get(self, job_id: str) -> Job | None:
        return self.rows.get(job_id)

    def find_by_key(self, job_type: str, key: str) -> Job | None:
        """``SELECT_BY_KEY``: the key's newest round."""
        with self.lock:
            found = [
                j for j in self.rows.values() if j.job_type == job_type and j.idempotency_key == key
            ]
        return max(found, key=lambda j: j.key_round, default=None)

    def pipeline(self, correlation_id: str) -> list[Job]:
        with self.lock:
            found = [j for j in self.rows.values() if j.correlation_id == correlation_id]
        return sorted(found, key=lambda j: (j.created_at, j.id))

    def events(self, job_id: str) -> list[JobEvent]:
        return self.history(job_id)

    def find(self, filt: JobFilter, after: Position | None, limit: int) -> list[Job]:
        """``reads.find_statement``: newest first, strictly after ``after``."""
        with self.lock:
            found = [j for j in self.rows.values() if filt.matches(j)]
        if after is not None:
            found = [j for j in found if (j.created_at, j.id) < (after.created_at, after.id)]
        found.sort(key=lambda j: (j.created_at, j.id), reverse=True)
        return found[:limit]

    def stats(self, now: datetime | None = None) -> dict[str, dict[str, Any]]:
        """Counts per queue and status, the oldest due pending job's age, ``scheduled``."""
        now = now or utcnow()
        out: dict[str, dict[str, Any]] = {}
        with self.lock:
            jobs = list(self.rows.values())
        for job in jobs:
            entry = out.setdefault(job.queue_name, _empty_stats())
            entry["counts"][job.status.value] += 1
            entry["total"] += 1
        for job in jobs:
            if job.status is not JobStatus.PENDING:
                continue
            entry = out[job.queue_name]
            if not self.free(job.not_before):  # ``COUNT_SCHEDULED``, not ``OLDEST_PENDING``
                entry["scheduled"] += 1
                continue
            age = max(0.0, (now - job.created_at).total_seconds())
            oldest = entry["oldest_pending_age_s"]
            entry["oldest_pending_age_s"] = age if oldest is None else max(oldest, age)
        return out

    def queue_health(self, since_s: float = 3600.0) -> dict[str, dict[str, int]]:
        """``FAILED_SINCE`` and ``EXPIRED_LEASES``, per queue."""
        since, now = self.at(-since_s), self.time()
        out: dict[str, dict[str, int]] = {}
        with self.lock:
            jobs = list(self.rows.values())
        for job in jobs:
            failed = job.status is JobStatus.FAILED
            failed = failed and job.finished_at is not None and job.finished_at >= since
            until = job.locked_until
            expired = job.status is JobStatus.PROCESSING and (until is None or until < now)
            for key, counted in (("failed_last_hour", failed), ("expired_leases", expired)):
                if counted:
                    entry = out.setdefault(
                        job.queue_name, {"failed_last_hour": 0, "expired_leases": 0}
                    )
                    entry[key] += 1
        return out

    def ended_runs(self, since_s: float, limit: int) -> list[EndedRun]:
        """``ENDED_RUNS``: newest first."""
        since = self.at(-since_s)
        with self.lock:
            ended = [j for j in self.rows.values() if j.finished_at and j.finished_at >= since]
        ended.sort(key=lambda j: j.finished_at or since, reverse=True)
        return [
            EndedRun(j.queue_name, j.status.value, j.started_at, j.finished_at or since)
            for j in ended[:limit]
        ]

    def backlog(self, *, cutoff: datetime) -> int:
        """``COUNT_UNPUBLISHED``."""
        with self.lock:
            return sum(
                1
                for j in self.rows.values()
                if j.status is JobStatus.PENDING
                and j.published_at is None
                and j.updated_at < cutoff
                and not self.on_purpose(j)
                and self.free(j.not_before)
            )
