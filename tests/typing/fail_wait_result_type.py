"""Must fail: ``wait`` on an ``EnqueueResult`` returns the body's type."""

from celery_tracked import Tracker, tracked_task


@tracked_task
def ocr(document_id: str) -> int:
    return len(document_id)


def produce(tracker: Tracker) -> None:
    text: str = tracker.wait(ocr.enqueue("d-1"))  # expect: assignment
    print(text)
