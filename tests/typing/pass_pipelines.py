"""Must pass ``mypy --strict``: a step's successors are typed like their tasks."""

from __future__ import annotations

from typing import Any

from celery_tracked import TrackedTask, Tracker, tracked_task


@tracked_task
def exam(module_id: str, index: int) -> str:
    return f"{module_id}:{index}"


@tracked_task(bind=True)
def lessons(self: TrackedTask[Any, Any], module_id: str) -> None:
    successor_id: str = self.then(exam, module_id, 1)
    fallback: str = self.otherwise(exam, module_id, index=0)
    keyed: str = self.successor(exam, idempotency_key=f"exam:{module_id}")(module_id, 2)
    print(successor_id, fallback, keyed)


def status(tracker: Tracker, correlation_id: str) -> str:
    pipeline = tracker.pipeline(correlation_id)
    counts: dict[str, int] = pipeline.counts
    print(counts, pipeline.render(), [job.id for job in pipeline.jobs])
    return pipeline.state
