"""Must pass ``mypy --strict``: tracked tasks are typed by their bodies."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.result import AsyncResult

from celery_tracked import EnqueueResult, TrackedTask, Tracker, tracked_task

app = Celery("typing")


@tracked_task
def ocr(document_id: str, pages: int = 1) -> dict[str, int]:
    return {document_id: pages}


@tracked_task(app=app, queue="ocr", max_attempts=2, idempotency_key="ocr:{document_id}")
def count(document_id: str) -> int:
    return len(document_id)


@tracked_task(app=app, bind=True)
def bound(self: TrackedTask[Any, Any], document_id: str) -> str:
    return f"{self.name}:{document_id}"


def produce(tracker: Tracker) -> None:
    first: EnqueueResult[dict[str, int]] = ocr.enqueue("d-1", pages=3)
    result: dict[str, int] = tracker.wait(first)
    number: int = tracker.wait(count.enqueue("d-2"), timeout=5)
    text: str = tracker.wait(bound.enqueue("d-3"))
    keyed = count.with_options(idempotency_key="k", options={"countdown": 5})("d-4")
    also: int = tracker.wait(keyed)
    untyped: bytes = tracker.wait(first.job_id)  # a job id: the result is Any
    legacy = ocr.enqueue("d-5", _idempotency_key="k")  # type: ignore[call-arg]
    async_result: AsyncResult[int] = count.delay("d-6")
    direct: int = count("d-7")
    job_id: str = first.job_id
    created: bool = keyed.created
    print(result, number, text, also, untyped, legacy, async_result, direct, job_id, created)


typed_task: TrackedTask[[str], int] = count
