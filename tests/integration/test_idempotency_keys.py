"""Per-call idempotency keys are literal; only the task's own key is a template
(issue 6, item 6). PostgreSQL and SQLite, real Redis."""

from __future__ import annotations

import pytest
import redis

from celery_tracked import tracked_task

from .conftest import AppFactory, queue_messages, tracker_of
from .test_enqueue import row_count


@pytest.mark.parametrize("key", ["order-{2024}", "client-key-{}", '{"k":1}', "a{document_id}b"])
def test_a_client_supplied_key_is_stored_and_deduplicated_as_given(
    make_app: AppFactory, broker: redis.Redis, database_url: str, key: str
) -> None:
    app = make_app()

    @tracked_task(app=app, queue="keys", idempotency_key="doc:{document_id}")
    def ocr(document_id: str) -> None: ...

    first = ocr.enqueue(document_id="D1", _idempotency_key=key)
    again = ocr.apply_async(kwargs={"document_id": "D2"}, idempotency_key=key)
    job = tracker_of(app).get_job(first.job_id)
    assert job is not None and job.idempotency_key == key
    assert first.created and again.id == first.job_id
    assert row_count(database_url) == 1 and len(queue_messages(broker, "keys")) == 1
    # the task's own template still formats the call's arguments
    templated = ocr.enqueue(document_id="D1")
    templated_job = tracker_of(app).get_job(templated.job_id)
    assert templated_job is not None and templated_job.idempotency_key == "doc:D1"
