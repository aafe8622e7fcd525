"""The project's tasks, tracked."""

from __future__ import annotations

from typing import Any

from celery_tracked import tracked_task

from .celery import app


@tracked_task(app=app, job_type="add")
def add(x: int, y: int) -> int:
    return x + y


@tracked_task(app=app, autoretry_for=())  # it retried nothing before the conversion
def parse_int(text: str) -> int:
    return int(text)  # ValueError for "x": failed at once, the error is the body's own


@tracked_task(
    app=app,
    bind=True,
    autoretry_for=(ConnectionError,),
    retry_backoff=True,
    max_retries=3,
)
def fetch(self: Any, url: str) -> dict[str, Any]:
    if self.request.retries == 0:
        raise ConnectionError(f"{url} unreachable")  # the first attempt only
    return {"url": url, "attempt": self.request.retries + 1}


@tracked_task(app=app, idempotency_key="ocr:{document_id}")
def ocr(document_id: str, pages: int = 3) -> dict[str, Any]:
    return {"document_id": document_id, "pages": pages}


@tracked_task(app=app)
def scan(document_id: str) -> str:
    """Enqueues the document's OCR from inside a task: its job id."""
    return ocr.delay(document_id).id
