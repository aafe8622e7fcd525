"""``tracked show``'s note on a failure that was not retried: the reason its worker
recorded, in any process (the task need not be registered where the CLI runs)."""

from __future__ import annotations

from celery import Celery

from celery_tracked.cli import notes
from celery_tracked.core.jobs import JobEvent, JobStatus

from .job_rows import NOW, a_job

WHY = (
    "its task does not retry ValueError: under Celery's retry semantics, only self.retry "
    "and autoretry_for retry"
)


def _failed(message: str) -> JobEvent:
    return JobEvent(3, "j-1", "failed", JobStatus.FAILED, 1, message, 0, NOW)


def test_the_note_is_the_reason_its_worker_recorded() -> None:
    app = Celery("elsewhere", set_as_current=False)  # the task is not registered here
    job = a_job(status=JobStatus.FAILED, attempts_made=1, max_attempts=4, error_type="ValueError")
    recorded = [_failed(f"ValueError: bad x=1 password=***; not retried: {WHY}")]
    assert notes.retry_note(job, app, recorded) == f"  (not retried: {WHY})"
    # the error's own text cannot pose as the reason: the last one is the worker's
    posing = [_failed(f"ValueError: a; not retried: nonsense; not retried: {WHY}")]
    assert notes.retry_note(job, app, posing) == f"  (not retried: {WHY})"


def test_a_row_without_a_recorded_reason_keeps_the_general_note() -> None:
    app = Celery("elsewhere", set_as_current=False)
    job = a_job(status=JobStatus.FAILED, attempts_made=1, max_attempts=4, error_type="KeyError")
    note = notes.retry_note(job, app, [_failed("KeyError: 'x'")])
    assert note is not None and note.startswith("  (not retried: KeyError ended it")
    used_up = a_job(status=JobStatus.FAILED, attempts_made=4, max_attempts=4)
    assert notes.retry_note(used_up, app, [_failed(f"ValueError: x; not retried: {WHY}")]) is None
