"""Acceptance: a body whose error, stage and log line hold a lone surrogate (a file name
decoded with ``os.fsdecode``) ends ``failed`` with its real cause stored visibly escaped,
on a real worker and PostgreSQL; no log line dumps a statement or its values (trial of
issue 22, F1)."""

from __future__ import annotations

import uuid
from typing import Any

from celery_tracked import JobStatus
from tests.conftest import wait_for


def test_a_lone_surrogate_in_the_error_is_stored_escaped(env: Any, start_worker: Any) -> None:
    worker = start_worker()
    token = f"tok-{uuid.uuid4().hex}"
    job_id = env.task("acc.surrogate").enqueue(b"/tmp/x\xff.pdf".hex(), token).job_id
    job = env.wait_status(job_id, "completed", "failed", timeout=30)
    assert job.status is JobStatus.FAILED, env.diagnose(job_id)
    assert (job.error_type, job.error_message) == ("ValueError", "bad file /tmp/x\\udcff.pdf")
    assert job.stage == "reading /tmp/x\\udcff.pdf" and job.attempts_made == 2
    history = env.tracker.history(job_id)
    assert [e.message for e in history].count("opening /tmp/x\\udcff.pdf") == 2
    assert [e.event for e in history][-1] == "failed"
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    log = worker.log()
    assert "UnicodeEncodeError" not in log and "UPDATE" not in log and token not in log
