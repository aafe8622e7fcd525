"""The project's eager tests, written as a Celery user writes them (docs/converting.md)."""

from __future__ import annotations

import uuid

import pytest
from celery import Celery
from celery.result import EagerResult
from proj.tasks import add, fetch, ocr, parse_int

from celery_tracked import JobStatus, Tracker


def history(celery_app: Celery, job_id: str) -> list[str]:
    return [event.event for event in Tracker.for_app(celery_app).history(job_id)]


def test_add(celery_app: Celery) -> None:
    result = add.delay(2, 3)
    assert isinstance(result, EagerResult)
    assert result.get() == 5
    assert add.apply_async((2, 4)).get() == 6
    job = Tracker.for_app(celery_app).get_job(result.id)
    assert job is not None and job.status is JobStatus.COMPLETED
    assert (job.result, job.attempts_made) == (5, 1)
    assert history(celery_app, result.id) == ["enqueued", "started", "completed"]


def test_parse_int_raises_its_own_error(celery_app: Celery) -> None:
    job_id = str(uuid.uuid4())
    with pytest.raises(ValueError, match="invalid literal for int"):
        parse_int.apply_async(("x",), task_id=job_id)
    job = Tracker.for_app(celery_app).get_job(job_id)
    assert job is not None and job.status is JobStatus.FAILED
    assert (job.error_type, job.attempts_made) == ("ValueError", 1)
    assert history(celery_app, job_id) == ["enqueued", "started", "failed"]


def test_parse_int_without_propagation(celery_app: Celery, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(celery_app.conf, "task_eager_propagates", False)
    result = parse_int.delay("x")
    assert result.failed() and isinstance(result.result, ValueError)
    with pytest.raises(ValueError):
        result.get()
    job = Tracker.for_app(celery_app).get_job(result.id)
    assert job is not None and job.status is JobStatus.FAILED


def test_fetch_retries_then_completes(celery_app: Celery) -> None:
    result = fetch.delay("https://example.com/a")
    assert result.get() == {"url": "https://example.com/a", "attempt": 2}
    job = Tracker.for_app(celery_app).get_job(result.id)
    assert job is not None and (job.status, job.attempts_made) == (JobStatus.COMPLETED, 2)
    assert history(celery_app, result.id) == [
        "enqueued",
        "started",
        "retrying",
        "started",
        "completed",
    ]


def test_ocr_runs_once_per_document(celery_app: Celery) -> None:
    document = str(uuid.uuid4())
    first = ocr.delay(document)
    second = ocr.delay(document, pages=9)
    assert second.id == first.id
    assert second.get() == first.get() == {"document_id": document, "pages": 3}
    assert history(celery_app, first.id) == ["enqueued", "started", "completed"]
