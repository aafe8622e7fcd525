"""Must fail: ``enqueue`` checks the body's arity."""

from celery_tracked import tracked_task


@tracked_task(queue="ocr")
def ocr(document_id: str, pages: int) -> int:
    return pages


ocr.enqueue("d-1")  # expect: call-arg
