"""Must fail: ``delay`` checks the body's keywords."""

from celery_tracked import tracked_task


@tracked_task
def ocr(document_id: str) -> int:
    return len(document_id)


ocr.delay(document="d-1")  # expect: call-arg
