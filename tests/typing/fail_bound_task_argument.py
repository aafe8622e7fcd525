"""Must fail: with ``bind=True`` the task itself is not an argument of the call."""

from typing import Any

from celery_tracked import TrackedTask, tracked_task


@tracked_task(bind=True)
def ocr(self: TrackedTask[Any, Any], document_id: str) -> int:
    return len(document_id)


ocr.enqueue(ocr, "d-1")  # expect: call-arg
