"""The story's tracked tasks: each body reports its progress with ``self.set_progress``.

- ``demo.ocr`` reads a document page by page, then declares ``demo.index`` as its
  successor (``self.then``: created with its completion, never twice);
- ``demo.fetch`` fails its first attempt (a flaky upstream), then completes;
- ``demo.report`` always fails: retried until its attempts are used up;
- ``demo.import_file`` raises ``Unrecoverable``: failed at once, no retry.

The sleeps stand for the work. Nothing here depends on the mode (embedded or services).
"""

from __future__ import annotations

import time
from typing import Any

from celery_tracked import Unrecoverable, tracked_task

#: How long one unit of (pretend) work takes, seconds.
WORK_S = 0.25


@tracked_task(
    bind=True,
    name="demo.ocr",
    queue="documents",
    job_type="ocr",
    max_attempts=3,
    idempotency_key="ocr:{document_id}",
)
def ocr(self: Any, document_id: str, pages: int) -> dict[str, Any]:
    for page in range(1, pages + 1):
        self.set_progress(100 * (page - 1) // pages, f"reading page {page}/{pages}")
        time.sleep(WORK_S)
    self.then(index, document_id, pages)  # the indexing step, once OCR completed
    return {"document_id": document_id, "pages": pages}


@tracked_task(
    bind=True,
    name="demo.index",
    queue="documents",
    job_type="indexing",
    max_attempts=3,
    idempotency_key="index:{document_id}",
)
def index(self: Any, document_id: str, pages: int) -> dict[str, Any]:
    for percent, stage in ((0, "tokenizing"), (40, "embedding"), (80, "writing the index")):
        self.set_progress(percent, stage)
        time.sleep(WORK_S)
    return {"document_id": document_id, "terms": 120 * pages}


@tracked_task(bind=True, name="demo.fetch", queue="jobs", job_type="fetch", max_attempts=3)
def fetch(self: Any, url: str) -> dict[str, Any]:
    self.set_progress(10, "connecting")
    time.sleep(WORK_S)
    if self.request.retries == 0:  # the first attempt: the upstream times out
        raise ConnectionError(f"{url} timed out")
    self.set_progress(60, "downloading")
    time.sleep(WORK_S)
    return {"url": url, "bytes": 5120}


@tracked_task(bind=True, name="demo.report", queue="jobs", job_type="report", max_attempts=3)
def report(self: Any, report_id: str) -> dict[str, Any]:
    self.set_progress(20, "querying the warehouse")
    time.sleep(WORK_S / 2)
    raise TimeoutError(f"warehouse did not answer for report {report_id}")


@tracked_task(bind=True, name="demo.import_file", queue="jobs", job_type="import", max_attempts=3)
def import_file(self: Any, file_id: str) -> dict[str, Any]:
    self.set_progress(5, "checking the file")
    time.sleep(WORK_S / 2)
    raise Unrecoverable(f"file {file_id} is not a PDF")  # failed now: retrying cannot help
