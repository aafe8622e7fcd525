"""Pipelines (issue 8), pure parts: when a fail-soft successor follows, a pipeline's
state, its tree, and the deterministic key of a successor without one."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from celery.exceptions import Retry

from celery_tracked import Unrecoverable
from celery_tracked.adapter.celery_signals import CELERY_SIGNALS
from celery_tracked.core import outcomes
from celery_tracked.core.jobs import Job, JobStatus
from celery_tracked.core.pipelines import Pipeline, pipeline_state
from tests.unit.job_rows import NOW, a_job


def job(n: int, status: JobStatus, parent: int | None = None, **changes: Any) -> Job:
    base: dict[str, Any] = {"id": f"j{n}", "celery_task_id": f"j{n}", "status": status}
    base.update(job_type=f"step{n}", task_name=f"app.step{n}", attempts_made=1)
    base.update(correlation_id="j1", parent_job_id=None if parent is None else f"j{parent}")
    return a_job(**{**base, "created_at": NOW + timedelta(seconds=n), **changes})


C, F, P, R, X = (
    JobStatus.COMPLETED,
    JobStatus.FAILED,
    JobStatus.PROCESSING,
    JobStatus.RETRYING,
    JobStatus.CANCELLED,
)


def exhausted(error: BaseException, attempt: int, most: int, *retryable: Any) -> bool:
    """``outcomes.exhausted``, Celery's ``Retry`` read as the adapter's runs read it."""
    return outcomes.exhausted(error, attempt, most, *retryable, signals=CELERY_SIGNALS)


def test_a_failure_is_exhausted_only_on_the_last_attempt_of_a_retried_error() -> None:
    assert exhausted(ValueError(), 3, 3)
    assert not exhausted(ValueError(), 2, 3)
    assert not exhausted(Unrecoverable("credits"), 3, 3), "never after Unrecoverable"
    assert not exhausted(KeyError(), 3, 3, lambda e: isinstance(e, ValueError))
    assert exhausted(ValueError(), 1, 1, lambda e: isinstance(e, ValueError))
    retry = Retry(exc=ConnectionError("down"))
    assert exhausted(retry, 3, 3)
    assert not exhausted(Retry(exc=Unrecoverable("x")), 3, 3)


@pytest.mark.parametrize(
    ("jobs", "state"),
    [
        ([job(1, C), job(2, C, 1)], "completed"),
        ([job(1, C), job(2, P, 1)], "running"),
        ([job(1, C), job(2, R, 1)], "running"),
        ([job(1, C), job(2, F, 1, attempts_made=3, retries_exhausted=True)], "failed"),
        ([job(1, C), job(2, F, 1, attempts_made=1)], "halted"),
        # Unrecoverable on the last attempt (max_attempts=1): stopped, not used up
        ([job(1, C), job(2, F, 1, attempts_made=1, max_attempts=1)], "halted"),
        ([job(1, C), job(2, X, 1)], "halted"),
        # a failed step whose fail-soft successor completed is not a leaf
        ([job(1, C), job(2, F, 1, retries_exhausted=True), job(3, C, 2)], "completed"),
        # a tree: one branch exhausted, the other completed
        ([job(1, C), job(2, C, 1), job(3, F, 1, retries_exhausted=True)], "failed"),
        ([job(1, C), job(2, F, 1), job(3, F, 1, retries_exhausted=True)], "failed"),
    ],
)
def test_a_pipelines_state(jobs: list[Job], state: str) -> None:
    assert pipeline_state(jobs) == state


def test_the_tree_lists_each_job_once_under_its_parent() -> None:
    jobs = (job(1, C), job(2, C, 1), job(3, C, 2), job(4, F, 1, error_type="E"), job(5, C, 4))
    pipeline = Pipeline("j1", jobs)
    assert [(depth, j.id) for depth, j in pipeline.tree()] == [
        (0, "j1"),
        (1, "j2"),
        (2, "j3"),
        (1, "j4"),
        (2, "j5"),
    ]
    assert [j.id for j in pipeline.children(None)] == ["j1"]
    assert pipeline.counts["completed"] == 4 and pipeline.counts["failed"] == 1
    lines = pipeline.render().splitlines()
    assert lines[0] == "pipeline j1: completed (completed 4, failed 1)"
    assert lines[4].startswith("   └─ step4  failed  j4  attempts 1/3  E: None")
    assert lines[5].startswith("      └─ step5  completed")


def test_a_long_chain_renders_in_linear_time_and_width() -> None:
    jobs = tuple(job(n, C, n - 1 if n > 1 else None) for n in range(1, 3001))
    lines = Pipeline("j1", jobs).render().splitlines()
    assert len(lines) == 3001
    assert lines[-1].startswith("   " * 24 + "[2999] └─ step3000")
    assert max(len(line) for line in lines) < 200
