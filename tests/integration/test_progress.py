"""Progress and log lines written by a body run through the ``Runner`` (eager mode: the
same claim, fence and writes as a worker), on PostgreSQL and SQLite."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from celery_tracked import InvalidProgress, JobStatus, tracked_task
from tests.conftest import wait_for

from .conftest import AppFactory, tracker_of


def progress_of(app: Any, job_id: str) -> tuple[int, str | None, str]:
    job = tracker_of(app).get_job(job_id)
    assert job is not None
    return job.progress, job.stage, job.status.value


def log_lines(app: Any, job_id: str) -> list[tuple[str, int, str | None]]:
    return [
        (e.status.value, e.attempt, e.message)
        for e in tracker_of(app).history(job_id)
        if e.event == "log"
    ]


def test_progress_is_visible_while_the_body_runs_and_the_newest_value_is_written(
    make_app: AppFactory,
) -> None:
    app = make_app(task_always_eager=True, tracked_progress_interval_ms=300)
    seen = threading.Event()
    steps = [(10, "download"), (20, None), (35, "parse"), (36, None)]
    job_ids: list[str] = []

    @tracked_task(app=app, bind=True)
    def steps_body(self: Any) -> str:
        job_ids.append(self.request.id)
        for percent, stage in steps:
            seen.clear()
            assert self.set_progress(percent, stage) is True
            assert seen.wait(10), f"the test never saw {percent}"
        for n in range(1000):  # held back: only the last one must reach the row
            self.set_progress(40 + n * 50 // 1000)
        return "done"

    runner = threading.Thread(target=lambda: steps_body.delay().get())
    runner.start()
    try:
        wait_for(lambda: job_ids, what="the body to start")
        last_stage = None
        for percent, stage in steps:
            last_stage = stage or last_stage
            expected = (percent, last_stage, "processing")
            # the first at once; the next ones held back, then written by the flusher
            wait_for(lambda e=expected: progress_of(app, job_ids[0]) == e, what=str(expected))
            seen.set()
    finally:
        seen.set()
        runner.join(20)
    assert progress_of(app, job_ids[0]) == (100, "parse", "completed")  # stage kept


def test_the_newest_progress_is_written_before_a_failure(make_app: AppFactory) -> None:
    app = make_app(task_always_eager=True, tracked_progress_interval_ms=60_000)
    ids: list[str] = []

    @tracked_task(app=app, bind=True, max_attempts=1)
    def fails(self: Any) -> None:
        ids.append(self.request.id)
        self.set_progress(5, "first")
        self.set_progress(60, "upload")  # held back a minute: written as the body ends
        raise RuntimeError("upload refused")

    fails.delay()
    assert progress_of(app, ids[0]) == (60, "upload", "failed")


def test_update_state_progress_feeds_the_row_and_bad_values_raise(make_app: AppFactory) -> None:
    app = make_app(task_always_eager=True, tracked_progress_interval_ms=0)
    observed: list[tuple[int, str | None, str]] = []

    @tracked_task(app=app, bind=True)
    def celery_style(self: Any) -> None:
        self.update_state(state="PROGRESS", meta={"current": 3, "total": 12, "stage": "pages"})
        observed.append(progress_of(app, self.request.id))
        self.update_state(state="PROGRESS", meta={"current": 12, "total": 0})  # no progress
        self.update_state(state="CUSTOM", meta={"percent": 90})  # not progress
        observed.append(progress_of(app, self.request.id))
        with pytest.raises(InvalidProgress):
            self.set_progress(float("nan"))
        with pytest.raises(InvalidProgress):
            self.set_progress(True)

    celery_style.delay().get()
    assert observed == [(25, "pages", "processing")] * 2


def test_log_lines_are_masked_bounded_per_job_and_kept_across_attempts(
    make_app: AppFactory,
) -> None:
    app = make_app(task_always_eager=True, tracked_log_lines_per_job=3)
    returned: list[bool] = []

    @tracked_task(app=app, bind=True, max_attempts=2)
    def chatty(self: Any, user: str, password: str) -> None:
        returned.append(self.log(f"login {user} with {password}"))
        returned.append(self.log("api_key=abc123 for redis://u:pw@host", level="warning"))
        returned.extend(self.log(f"line {n}") for n in range(3))
        raise ConnectionError("again")  # the second attempt logs nothing more

    result = chatty.delay("ann", "hunter22")
    assert returned == [True, True, True, False, False] + [False] * 5
    lines = log_lines(app, result.id)
    assert lines == [
        ("processing", 1, "login ann with ***"),
        ("processing", 1, "warning: api_key=*** for redis://***@host"),
        ("processing", 1, "line 0"),
        (
            "processing",
            1,
            "log limit reached (3 lines per job): further lines of this job are dropped",
        ),
    ]
    job = tracker_of(app).get_job(result.id)
    assert job is not None and (job.status, job.attempts_made) == (JobStatus.FAILED, 2)


def test_a_run_that_lost_its_lease_writes_no_progress_and_no_log(
    make_app: AppFactory, database_url: str
) -> None:
    app = make_app(task_always_eager=True, tracked_progress_interval_ms=0)
    ids: list[str] = []
    returned: list[bool] = []

    @tracked_task(app=app, bind=True)
    def overtaken(self: Any) -> None:
        ids.append(self.request.id)
        self.set_progress(10, "mine")
        engine = create_engine(database_url, poolclass=NullPool)
        with engine.begin() as conn:  # another attempt takes the job over
            conn.execute(
                text(
                    "UPDATE background_jobs SET attempts_made = attempts_made + 1, "
                    "progress = 50, stage = 'theirs' WHERE id = :id"
                ),
                {"id": self.request.id},
            )
        engine.dispose()
        self.set_progress(90, "late")
        returned.append(self.log("from the old attempt"))

    overtaken.delay()
    assert returned == [False]
    assert progress_of(app, ids[0]) == (50, "theirs", "processing")
    assert log_lines(app, ids[0]) == []
