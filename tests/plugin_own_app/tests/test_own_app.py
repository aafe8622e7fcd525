"""The "your own app" advice combined with the page's inline (eager) example."""

from __future__ import annotations

from typing import Any

import pytest
from myshop.celery import app, send_invoice

from celery_tracked import JobStatus


@pytest.mark.celery(task_always_eager=True, task_eager_propagates=True)
def test_inline_mode_on_your_own_app(tracked: Any) -> None:
    assert send_invoice.delay("o-1", amount=6).get() == {"order_id": "o-1", "total": 6}
    (job,) = tracked.jobs(send_invoice)
    assert job.status is JobStatus.COMPLETED


def test_the_mark_is_put_back_after_its_test(tracked: Any) -> None:
    assert not app.conf.task_always_eager
    result = send_invoice.delay("o-2", amount=7)
    tracked.assert_enqueued(send_invoice, order_id="o-2")
    tracked.run_enqueued()
    tracked.assert_status(result, JobStatus.COMPLETED)
