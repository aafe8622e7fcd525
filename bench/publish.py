"""Publish N jobs of one task from a fresh process, timing every ``apply_async`` call.

    python -m bench.publish bench.app:app bench.tracked_noop 5000

Run by ``bench/run.py`` in its own process so that the enqueue phase's PostgreSQL
statistics are flushed when it exits (a backend reports its counters at exit, or up to
10 s later when idle). Prints one JSON object: publish time, rate, p50/p99/mean in ms.
"""

from __future__ import annotations

import importlib
import json
import statistics
import sys
import time


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def main() -> None:
    spec, task_name, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    module, _, attr = spec.partition(":")
    app = getattr(importlib.import_module(module), attr)
    task = app.tasks[task_name]
    latencies: list[float] = []
    clock = time.perf_counter
    started = clock()
    for _ in range(jobs):
        t0 = clock()
        task.apply_async()
        latencies.append(clock() - t0)
    elapsed = clock() - started
    latencies.sort()
    result = {
        "publish_s": elapsed,
        "publish_rate": jobs / elapsed,
        "enqueue_p50_ms": percentile(latencies, 50) * 1000,
        "enqueue_p99_ms": percentile(latencies, 99) * 1000,
        "enqueue_mean_ms": statistics.fmean(latencies) * 1000,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
