"""The per-run reporter against an in-memory twin of its three store calls: a failed
write is swallowed and carried by the next one, the flusher writes a held-back value,
the end writes the newest one, a lost lease stops every write."""

from __future__ import annotations

import threading
import time
from typing import Any

from celery_tracked import StoreError
from celery_tracked.core.jobs import Claim
from celery_tracked.core.messages import TrackedHeaders
from celery_tracked.core.run import Run
from celery_tracked.core.settings import Settings
from celery_tracked.services.reports import Flusher, ProgressReporter
from tests.conftest import wait_for


class Store:
    """``report_progress``, ``log_line`` and ``log_lines`` on lists; ``failing`` makes
    the next writes raise, ``lost`` makes them match nothing."""

    def __init__(self) -> None:
        self.progress: list[tuple[int, str | None]] = []
        self.lines: list[str] = []
        self.failing = 0
        self.lost = False
        self.lock = threading.Lock()

    def report_progress(self, claim: Claim, *, percent: int, stage: str | None, now: Any) -> bool:
        with self.lock:
            if self.failing:
                self.failing -= 1
                raise StoreError("connection refused")
            if self.lost:
                return False
            self.progress.append((percent, stage))
            return True

    def log_line(self, claim: Claim, *, message: str, now: Any) -> bool:
        if self.failing:
            self.failing -= 1
            raise StoreError("connection refused")
        if self.lost:
            return False
        self.lines.append(message)
        return True

    def log_lines(self, job_id: str) -> int:
        return len(self.lines)


def reporter(store: Store, interval_ms: int = 10_000, lines: int = 200) -> ProgressReporter:
    run = Run(
        headers=TrackedHeaders(job_id="j-1"),
        task_name="app.t",
        job_type="t",
        queue="q",
        worker="w",
        backoff_base_ms=1000,
        secrets=lambda: ["hunter22"],
    )
    settings = Settings(progress_interval_ms=interval_ms, log_lines_per_job=lines)
    return ProgressReporter(store, Claim("j-1", 1, 3), run, settings, Flusher())  # type: ignore[arg-type]


def test_a_failed_write_is_swallowed_and_the_end_writes_the_newest_value() -> None:
    store = Store()
    r = reporter(store)
    store.failing = 1
    r.progress(10, "a")  # raises nothing into the body
    r.progress(20, None)  # held back (the failed write counts as sent)
    assert store.progress == []
    r.end()
    assert store.progress == [(20, "a")]
    r.progress(30, None)  # after the end: nothing
    assert store.progress == [(20, "a")]


def test_the_flusher_writes_a_held_back_value_once_due() -> None:
    store = Store()
    r = reporter(store, interval_ms=100)
    r.progress(10, "hunter22 stage")  # a secret in the stage is masked
    r.progress(11, None)
    r.progress(12, None)
    assert store.progress == [(10, "*** stage")]
    wait_for(lambda: len(store.progress) == 2, timeout=5, what="the flusher")
    assert store.progress[1] == (12, "*** stage")
    time.sleep(0.3)
    assert len(store.progress) == 2  # nothing pending: no further write
    r.end()
    assert len(store.progress) == 2


def test_a_lost_lease_stops_progress_and_log_lines() -> None:
    store = Store()
    r = reporter(store, interval_ms=0)
    r.progress(10, None)
    store.lost = True
    r.progress(20, None)
    assert r.log("too late", "info") is False
    store.lost = False
    r.progress(30, None)
    r.end()
    assert store.progress == [(10, None)] and store.lines == []


def test_log_lines_stop_after_the_limit_with_one_marker() -> None:
    store = Store()
    r = reporter(store, lines=2)
    store.failing = 1
    assert r.log("lost to the database", "info") is False  # swallowed
    assert [r.log(f"n{n} hunter22", "error") for n in range(4)] == [True, True, False, False]
    assert store.lines == [
        "error: n0 ***",
        "error: n1 ***",
        "log limit reached (2 lines per job): further lines of this job are dropped",
    ]


def test_an_unexpected_error_of_a_write_never_reaches_the_body() -> None:
    store = Store()
    r = reporter(store, interval_ms=0)

    def broken(*args: Any, **kwargs: Any) -> bool:
        raise RuntimeError("a bug below")

    store.report_progress = broken  # type: ignore[method-assign]
    store.log_line = broken  # type: ignore[method-assign]
    r.progress(10, None)
    assert r.log("hello", "info") is False
    r.end()
