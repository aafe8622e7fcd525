"""Throughput's service (``Tracker.throughput``): one bounded read of the newest ended jobs
(``ReadStore.ended_runs``) summarized on the store's clock (``core/throughput.py``)."""

from __future__ import annotations

from typing import Any

from ..core.finder import check_limit
from ..core.ports import ReadStore
from ..core.throughput import summarize

#: the largest sample one read may take
MAX_SAMPLE = 100_000


def read(store: ReadStore, window_s: float, sample: int) -> dict[str, Any]:
    """Per queue: ended jobs by status, per bucket and per minute, and run-time
    percentiles; ``InvalidFilter`` for a bad ``sample``."""
    runs = store.ended_runs(window_s, check_limit(sample, MAX_SAMPLE, "sample"))
    return summarize(runs, store.clock(), sample, window_s)
