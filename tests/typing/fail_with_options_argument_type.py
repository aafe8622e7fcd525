"""Must fail: the enqueuer ``with_options`` returns checks the body's arguments."""

from celery_tracked import tracked_task


@tracked_task
def ocr(document_id: str) -> int:
    return len(document_id)


ocr.with_options(idempotency_key="k")(b"d-1")  # expect: arg-type
