"""Must fail: ``self.then`` checks the successor's argument types."""

from typing import Any

from celery_tracked import TrackedTask, tracked_task


@tracked_task
def exam(module_id: str) -> str:
    return module_id


@tracked_task(bind=True)
def lessons(self: TrackedTask[Any, Any], module_id: str) -> None:
    self.then(exam, 42)  # expect: arg-type
