"""What a running body reports (``ReportStore``): progress and log lines."""

from __future__ import annotations

from celery_tracked.core.fences import Completion
from celery_tracked.core.jobs import JobStatus, utcnow
from celery_tracked.core.ports import Store
from tests.contract.conftest import claimed, new_job


def test_progress_and_log_lines_are_written_while_the_run_holds_the_job(store: Store) -> None:
    job_id = new_job(store)
    claim = claimed(store, job_id)
    assert store.report_progress(claim, percent=40, stage="parse", now=utcnow())
    assert store.report_progress(claim, percent=55, stage=None, now=utcnow())
    job = store.get(job_id)
    assert job is not None and (job.progress, job.stage) == (55, "parse")
    assert store.log_line(claim, message="page 1 of 3", now=utcnow())
    assert store.log_line(claim, message="page 2 of 3", now=utcnow())
    assert store.log_lines(job_id) == 2
    lines = [e for e in store.events(job_id) if e.event == "log"]
    assert [(e.message, e.status, e.attempt) for e in lines] == [
        ("page 1 of 3", JobStatus.PROCESSING, 1),
        ("page 2 of 3", JobStatus.PROCESSING, 1),
    ]
    assert [e.event for e in store.events(job_id)] == ["enqueued", "started", "log", "log"]
    assert store.complete(claim, Completion(result_json=None, now=utcnow(), duration_ms=3))
    assert not store.log_line(claim, message="after the end", now=utcnow())
    assert not store.report_progress(claim, percent=10, stage=None, now=utcnow())
    assert store.log_lines(job_id) == 2
    done = store.get(job_id)
    assert done is not None and done.progress == 100
