"""The maintenance plugins' activity, pure: each plugin's last pass and its running totals.

One row of ``background_job_maintenance`` per plugin (``relay``, ``schedule``, ``reap``,
``cleanup``, ``probe``: ``services/maintenance.py``), written by one upsert at the end of
every pass (:class:`MaintenanceStore`): when the last pass started and ended (the
database's clock), its counts (:func:`counts_of`: numbers only, never a job id or a
payload), the masked error summary of a pass that failed; and since the plugin's first
recorded pass (``since``): how many passes, how many failed, how many jobs they moved.
``Tracker.maintenance()`` reads them; the dashboard's overview and
``celery tracked maintenance`` show them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True)
class Pass:
    """One pass to record: the plugin's ``name``, its report's ``counts``, the jobs it
    moved (``jobs``), its masked ``error`` summary (None: it succeeded) and how long it
    took (``elapsed_s``: it started that long before the record, on the database's clock)."""

    name: str
    counts: Mapping[str, int] = field(default_factory=dict)
    jobs: int = 0
    error: str | None = None
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class MaintenanceRun:
    """A plugin's last pass (``started_at``, ``ended_at``, ``counts``, ``jobs``,
    ``error``: None if it succeeded) and its totals since ``since``: ``passes``,
    ``failures``, ``jobs_total``. ``Tracker.maintenance()`` adds ``every_s`` (its default
    schedule's interval, :func:`every_s`) and ``read_at`` (the database's clock at the
    read): :attr:`age_s` and :attr:`stale` are judged at ``read_at``. A plugin with no
    recorded pass has ``passes`` 0 and no times."""

    name: str
    started_at: datetime | None = None
    ended_at: datetime | None = None
    counts: dict[str, int] = field(default_factory=dict)
    jobs: int = 0
    error: str | None = None
    passes: int = 0
    failures: int = 0
    jobs_total: int = 0
    since: datetime | None = None
    every_s: float | None = None
    read_at: datetime | None = None

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> MaintenanceRun:
        counts = row["counts"]
        return cls(
            row["name"],
            row["started_at"],
            row["ended_at"],
            dict(json.loads(counts) if isinstance(counts, str) else counts),
            int(row["jobs"]),
            row["error"],
            int(row["passes"]),
            int(row["failures"]),
            int(row["jobs_total"]),
            row["since"],
        )

    @property
    def ran(self) -> bool:
        """A pass of it was recorded."""
        return self.ended_at is not None

    @property
    def failed(self) -> bool:
        """The last pass raised."""
        return self.error is not None

    @property
    def duration_s(self) -> float | None:
        """How long the last pass took, in seconds (None: never run)."""
        if self.started_at is None or self.ended_at is None:
            return None
        return round((self.ended_at - self.started_at).total_seconds(), 3)

    @property
    def age_s(self) -> float | None:
        """Seconds from the last pass's end to ``read_at`` (None: either unknown)."""
        if self.ended_at is None or self.read_at is None:
            return None
        return max(0.0, (self.read_at - self.ended_at).total_seconds())

    @property
    def stale(self) -> bool:
        """Older than twice its schedule, or never run while it has one (no interval
        known: never stale)."""
        if self.every_s is None:
            return False
        age = self.age_s
        return age is None or age > 2 * self.every_s

    def as_dict(self) -> dict[str, Any]:
        age = self.age_s
        return {
            "name": self.name,
            "ran": self.ran,
            "started_at": _iso(self.started_at),
            "ended_at": _iso(self.ended_at),
            "duration_s": self.duration_s,
            "age_s": None if age is None else round(age, 1),
            "every_s": self.every_s,
            "stale": self.stale,
            "counts": dict(self.counts),
            "jobs": self.jobs,
            "failed": self.failed,
            "error": self.error,
            "passes": self.passes,
            "failures": self.failures,
            "jobs_total": self.jobs_total,
            "since": _iso(self.since),
        }


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def counts_of(report: Mapping[str, Any]) -> dict[str, int]:
    """The counts of a report's ``as_dict()``: a list (of job ids) is its length, an
    integer itself; anything else (a flag, a duration, a nested map) is left out."""
    counts: dict[str, int] = {}
    for key, value in report.items():
        if isinstance(value, (list, tuple)):
            counts[str(key)] = len(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            counts[str(key)] = value
    return counts


def jobs_of(counts: Mapping[str, int], moved: Iterable[str]) -> int:
    """The jobs a pass moved: the sum of its ``moved`` counts."""
    return sum(counts.get(key, 0) for key in moved)


class MaintenanceStore(Protocol):
    """The maintenance activity's store role (``store/maintenance.py``; in
    :class:`~.ports.Store`): one upsert per pass, the rows by name."""

    def record_maintenance(self, done: Pass) -> None: ...

    def maintenance(self) -> list[MaintenanceRun]: ...


def every_s(when: object) -> float | None:
    """The seconds between two passes of a plugin's schedule (``Maintenance.schedule``):
    an interval itself; a Celery schedule's ``run_every``; a crontab string of every day
    (its day and month fields ``*``) a day; else None (unknown: never judged stale)."""
    if isinstance(when, (int, float)) and not isinstance(when, bool):
        return float(when) if when > 0 else None
    if isinstance(when, str):
        fields = when.split()
        return 86400.0 if len(fields) == 5 and fields[2:] == ["*", "*", "*"] else None
    run_every = getattr(when, "run_every", None)
    seconds = getattr(run_every, "total_seconds", None)
    return float(seconds()) if callable(seconds) else None
