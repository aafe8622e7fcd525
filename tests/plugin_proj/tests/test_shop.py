"""The shop's tests, written only against docs/testing.md.

The keys are the same in every run (``invoice:o-1``...): each test gets a fresh store
and guard, so running this file twice in a row passes twice.
"""

from __future__ import annotations

import pytest
from shop.tasks import charge, fetch_rate, pack, place_order, refund, send_invoice

from celery_tracked import JobStatus


def test_an_invoice_is_enqueued_then_sent(tracked):
    result = send_invoice.delay("o-1", amount=30)
    job = tracked.assert_enqueued(send_invoice, order_id="o-1", amount=30)
    assert job.id == result.id and job.status is JobStatus.PENDING
    tracked.assert_not_enqueued(pack)

    ran = tracked.run_enqueued()
    assert [job.id for job in ran] == [result.id]
    job = tracked.assert_status(result, JobStatus.COMPLETED)
    assert job.result == {"order_id": "o-1", "total": "30 EUR"}
    assert tracked.events(result) == ["enqueued", "started", "completed"]
    assert tracked.enqueued() == []
    assert job.queue_name == "mail"  # a queue of its own: the worker consumes it too


def test_the_same_key_is_one_job(tracked):
    first = send_invoice.enqueue("o-2", 10)
    again = send_invoice.enqueue("o-2", 99)
    assert first.created and not again.created
    assert again.job_id == first.job_id
    assert len(tracked.enqueued(send_invoice)) == 1
    tracked.assert_enqueued(send_invoice, order_id="o-2", amount=10)

    tracked.run_enqueued()
    assert tracked.status(first) is JobStatus.COMPLETED
    assert send_invoice.enqueue("o-2", 10).created is False  # still that job's key


def test_a_flaky_job_is_retried_then_completes(tracked):
    result = fetch_rate.delay("USD")
    tracked.run_enqueued()
    job = tracked.assert_status(result, JobStatus.COMPLETED)
    assert (job.attempts_made, job.result) == (2, 1.1)
    assert tracked.events(result) == ["enqueued", "started", "retrying", "started", "completed"]


def test_a_job_failing_every_attempt_ends_failed(tracked):
    result = charge.delay("4242")
    tracked.run_enqueued()
    job = tracked.assert_status(result, "failed")
    assert (job.attempts_made, job.error_type) == (2, "ConnectionError")
    assert "cannot charge 4242" in job.error_message
    assert tracked.events(result) == ["enqueued", "started", "retrying", "started", "failed"]


def test_an_unrecoverable_job_fails_at_once(tracked):
    result = refund.delay("o-4")
    tracked.run_enqueued()
    job = tracked.assert_status(result, JobStatus.FAILED)
    assert job.attempts_made == 1
    assert tracked.events(result) == ["enqueued", "started", "failed"]


def test_an_order_runs_its_pipeline(tracked):
    result = place_order.delay("o-3", items=2)
    tracked.assert_not_enqueued(pack)  # successors exist once their step completed

    ran = tracked.run_enqueued()
    assert len(ran) == 4  # the order, its invoice, two packings
    successors = tracked.successors(result)
    assert sorted(job.task_name for job in successors) == [
        "shop.tasks.pack",
        "shop.tasks.pack",
        "shop.tasks.send_invoice",
    ]
    assert {job.idempotency_key for job in successors} == {
        "invoice:o-3",
        "pack:o-3:0",
        "pack:o-3:1",
    }
    assert all(job.parent_job_id == result.id for job in successors)
    pipeline = tracked.pipeline(result)
    assert pipeline.state == "completed"
    assert pipeline.counts["completed"] == 4
    assert tracked.job(successors[0]).correlation_id == result.id


def test_with_a_worker_running(tracked, tracked_worker):
    result = send_invoice.delay("o-5", amount=5, currency="USD")
    assert tracked.tracker.wait(result.id, timeout=10) == {"order_id": "o-5", "total": "5 USD"}
    assert tracked.events(result) == ["enqueued", "started", "completed"]


@pytest.mark.celery(task_always_eager=True, task_eager_propagates=True)
def test_inline_mode(tracked):
    assert send_invoice.delay("o-6", amount=6).get() == {"order_id": "o-6", "total": "6 EUR"}
    assert tracked.enqueued() == []
    with pytest.raises(ConnectionError):
        charge.delay("1111")
    (job,) = tracked.jobs(charge)
    assert (job.status, job.attempts_made) == (JobStatus.FAILED, 2)
