"""Progress and job log lines in a real ``celery worker`` (issue 8, item 4): values and
stages from ``set_progress`` and from Celery's ``update_state(state="PROGRESS")`` are
visible through ``get_job`` while the job runs; 10,000 calls in one body complete; log
lines are masked, bounded per job and shown by ``celery tracked show``."""

from __future__ import annotations

import json
import uuid
from typing import Any

from celery import Celery

from tests.conftest import wait_for


def observe(env: Any, job_id: str, expected: tuple[int, str | None]) -> None:
    def now() -> tuple[int, str | None, str] | None:
        job = env.tracker.get_job(job_id)
        return None if job is None else (job.progress, job.stage, job.status.value)

    try:
        wait_for(lambda: now() == (*expected, "processing"), timeout=20, what=str(expected))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.diagnose(job_id)}") from None


def events_of(env: Any, job_id: str) -> list[str]:
    return [e.event for e in env.tracker.history(job_id)]


def test_set_progress_values_and_stages_are_visible_while_the_job_runs(
    env: Any, start_worker: Any
) -> None:
    start_worker()
    steps = [[5, "download"], [30, None], [31, None], [60.9, "parse"], [90, "upload"]]
    job_id = env.task("acc.progress_steps").enqueue(steps=steps).job_id
    stage = None
    for n, (percent, new_stage) in enumerate(steps):
        stage = new_stage or stage  # a step without a stage keeps the last one
        # the first at once; one coming within the interval after it is held back, then
        # written by the flusher while the body waits
        observe(env, job_id, (int(percent), stage))
        env.redis.set(f"go:{job_id}:{n}", 1)
    job = env.wait_status(job_id, "completed")
    assert (job.progress, job.stage) == (100, "upload")
    assert events_of(env, job_id) == ["enqueued", "started", "completed"]  # no event rows


def test_update_state_progress_feeds_the_row_and_celerys_result_backend(
    env: Any, start_worker: Any
) -> None:
    backend_url = env.config["broker"]
    start_worker(environ={"TRACKED_TEST_RESULT_BACKEND": backend_url})
    meta_task = env.task("acc.progress_meta").with_options(options={"ignore_result": False})
    job_id = meta_task(total=3).job_id
    reader = Celery("reader", broker=backend_url, backend=backend_url, set_as_current=False)
    try:
        for current, percent in ((1, 33), (2, 66), (3, 100)):
            observe(env, job_id, (percent, f"page {current}"))
            result = reader.AsyncResult(job_id)  # Celery's own state, stored first (Flower)
            assert (result.state, result.info) == (
                "PROGRESS",
                {"current": current, "total": 3, "stage": f"page {current}"},
            )
            env.redis.set(f"go:{job_id}:{current}", 1)
        env.wait_status(job_id, "completed")
        # stored by Celery after the body returned, so after the completion write
        wait_for(lambda: reader.AsyncResult(job_id).state == "SUCCESS", what="SUCCESS")
    finally:
        reader.close()


def test_ten_thousand_set_progress_calls_in_one_body_complete(env: Any, start_worker: Any) -> None:
    start_worker()
    job_id = env.task("acc.progress_loop").enqueue(calls=10_000).job_id
    job = env.wait_status(job_id, "completed", timeout=60)
    assert isinstance(job.result, float)  # the loop's seconds: measured in bench/, not here
    assert (job.progress, job.stage) == (100, "loop")
    assert events_of(env, job_id) == ["enqueued", "started", "completed"]


def test_log_lines_are_masked_bounded_per_job_and_shown_by_tracked_show(
    env: Any, start_worker: Any, run_cli: Any
) -> None:
    start_worker()
    canary = f"canary-{uuid.uuid4().hex}"
    job_id = env.task("acc.log_lines").enqueue(user="ann", password=canary, lines=250).job_id
    job = env.wait_status(job_id, "completed", timeout=60)
    assert job.result == 198  # 2 + 198 lines reach the default limit of 200
    logs = [e for e in env.tracker.history(job_id) if e.event == "log"]
    assert len(logs) == 201
    assert {(e.status.value, e.attempt) for e in logs} == {("processing", 1)}
    assert logs[0].message == "connecting as ann with password ***"
    assert logs[1].message == "warning: dsn=postgresql://***@db/app"
    assert logs[199].message == "line 197"
    assert logs[200].message == (
        "log limit reached (200 lines per job): further lines of this job are dropped"
    )
    shown = run_cli("show", job_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert canary not in shown.stdout + shown.stderr
    out = json.loads(shown.stdout)
    assert out["progress"] == 100
    lines = out["history"]
    assert [e["event"] for e in lines] == ["enqueued", "started", *["log"] * 201, "completed"]
    assert (lines[2]["attempt"], lines[2]["message"]) == (1, "connecting as ann with password ***")
    table = run_cli("show", job_id)
    assert table.returncode == 0 and canary not in table.stdout
    assert "connecting as ann with password ***" in table.stdout
    history = env.sql("SELECT string_agg(message, ' ') FROM background_job_events")[0][0]
    assert "password ***" in history and canary not in history
