"""``core/throughput.py``: per queue counts, buckets, rate and run-time percentiles, exact
under the sample size and marked ``sampled`` at it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from celery_tracked.core.throughput import EndedRun, percentile, summarize

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)


def run(queue: str, ago_s: float, ran_ms: float | None, status: str = "completed") -> EndedRun:
    finished = NOW - timedelta(seconds=ago_s)
    started = None if ran_ms is None else finished - timedelta(milliseconds=ran_ms)
    return EndedRun(queue, status, started, finished)


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.95), percentile(values, 0.99)) == (
        50.0,
        95.0,
        99.0,
    )
    assert percentile([], 0.5) is None and percentile([7.0], 0.99) == 7.0


def test_a_window_read_whole_is_exact() -> None:
    runs = [run("mail", 30 * i, 100 * (i + 1)) for i in range(10)]  # the last 5 minutes
    runs += [run("ocr", 3000, 5000, "failed"), run("ocr", 3100, None, "cancelled")]
    found = summarize(runs, NOW, sample=100)
    assert found["sampled"] is False and found["covered_s"] == 3600
    mail, ocr = found["queues"]["mail"], found["queues"]["ocr"]
    assert mail["ended"] == {"completed": 10} and mail["per_minute"] == round(10 / 60, 2)
    assert mail["buckets"][-1] == 10 and sum(mail["buckets"]) == 10  # all in the newest
    assert mail["run_ms"] == {"p50": 500, "p95": 1000, "p99": 1000}
    assert ocr["ended"] == {"failed": 1, "cancelled": 1} and ocr["buckets"][1] == 2
    assert ocr["run_ms"] == {"p50": 5000, "p95": 5000, "p99": 5000}  # cancelled: never ran


def test_a_full_sample_is_a_rate_over_the_span_it_covers() -> None:
    runs = [run("mail", i, 10) for i in range(120)]  # 120 jobs in the last 2 minutes
    found = summarize(runs, NOW, sample=120)
    assert found["sampled"] is True and found["covered_s"] == 119
    assert found["queues"]["mail"]["per_minute"] == round(120 / (119 / 60), 2)
