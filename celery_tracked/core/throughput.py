"""Throughput and run times, pure: what the dashboard's overview shows per queue from the
newest ended jobs (``Tracker.throughput``).

The store reads at most ``sample`` of the jobs that ended within the window (newest first,
from the index on ``finished_at``: a bounded read at any table size). When it read fewer,
they are every job of the window: the counts and the rate are exact. When it read
``sample``, the rate is theirs over the span they cover (``sampled``: True) and the older
buckets are not covered. Run times (``finished_at - started_at``) of the jobs that ran:
the 50th, 95th and 99th percentiles (nearest rank).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

#: The overview's defaults: the last hour, in 12 buckets of 5 minutes, from at most 2,000
#: ended jobs.
WINDOW_S = 3600.0
BUCKETS = 12
SAMPLE = 2000


@dataclass(frozen=True)
class EndedRun:
    """One ended job as the throughput reads it."""

    queue_name: str
    status: str
    started_at: datetime | None
    finished_at: datetime


@dataclass
class QueueThroughput:
    """One queue's numbers (``as_dict`` for JSON)."""

    ended: dict[str, int] = field(default_factory=dict)
    #: jobs ended per bucket, oldest bucket first
    buckets: list[int] = field(default_factory=list)
    per_minute: float = 0.0
    run_ms: dict[str, int | None] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ended": dict(self.ended),
            "buckets": list(self.buckets),
            "per_minute": round(self.per_minute, 2),
            "run_ms": dict(self.run_ms),
        }


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile of sorted ``values`` (None when empty)."""
    if not values:
        return None
    rank = max(1, math.ceil(share * len(values)))
    return values[rank - 1]


def summarize(
    runs: Sequence[EndedRun],
    now: datetime,
    sample: int = SAMPLE,
    window_s: float = WINDOW_S,
    buckets: int = BUCKETS,
) -> dict[str, Any]:
    """The numbers of ``runs`` (read newest first, at most ``sample``) per queue, with
    ``sampled`` and ``covered_s`` (how far back the read reaches)."""
    sampled = len(runs) >= sample
    oldest = min((r.finished_at for r in runs), default=now)
    covered_s = (now - oldest).total_seconds() if sampled else window_s
    width = window_s / buckets
    queues: dict[str, QueueThroughput] = {}
    times: dict[str, list[float]] = {}
    for run in runs:
        entry = queues.setdefault(run.queue_name, QueueThroughput(buckets=[0] * buckets))
        entry.ended[run.status] = entry.ended.get(run.status, 0) + 1
        age = (now - run.finished_at).total_seconds()
        index = buckets - 1 - min(buckets - 1, max(0, int(age // width)))
        entry.buckets[index] += 1
        if run.started_at is not None:
            spent = (run.finished_at - run.started_at).total_seconds() * 1000
            times.setdefault(run.queue_name, []).append(max(0.0, spent))
    for name, entry in queues.items():
        entry.per_minute = sum(entry.ended.values()) / max(covered_s / 60, 1 / 60)
        ordered = sorted(times.get(name, []))
        entry.run_ms = {
            key: None if (value := percentile(ordered, share)) is None else int(value)
            for key, share in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
        }
    return {
        "window_s": window_s,
        "bucket_s": width,
        "sampled": sampled,
        "covered_s": round(covered_s, 1),
        "queues": {name: queues[name].as_dict() for name in sorted(queues)},
    }


class ThroughputStore(Protocol):
    """The throughput's read (``store/reads.py``'s ``ENDED_RUNS``; part of ``ReadStore``):
    the newest jobs that ended in the last ``since_s`` seconds (the store's clock), at most
    ``limit``, newest first."""

    def ended_runs(self, since_s: float, limit: int) -> list[EndedRun]: ...
