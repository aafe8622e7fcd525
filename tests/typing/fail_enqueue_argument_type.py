"""Must fail: ``enqueue`` checks the body's argument types."""

from celery_tracked import tracked_task


@tracked_task
def ocr(document_id: str) -> int:
    return len(document_id)


ocr.enqueue(123)  # expect: arg-type
