"""The read side: listings with filters and keyset pages, pipelines, statistics, health."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

from celery_tracked.core.fences import AttemptError, Completion
from celery_tracked.core.finder import JobFilter, Position
from celery_tracked.core.jobs import JobStatus, utcnow
from celery_tracked.core.ports import Store
from celery_tracked.store import JobStore, reads
from tests.contract.conftest import Backend, ago, claimed, new_job


def test_find_filters_and_pages_newest_first(store: Store) -> None:
    base = utcnow() - timedelta(hours=1)
    ids = [
        new_job(store, now=base + timedelta(minutes=i), queue_name="a" if i % 2 else "b")
        for i in range(6)
    ]
    new_job(store, now=base - timedelta(minutes=1), owner_id="u-1", job_type="other")
    failed = ids[4]
    assert store.fail(
        claimed(store, failed),
        AttemptError(error_type="Boom", error_message="m", duration_ms=1, now=utcnow()),
    )
    everything = store.find(JobFilter(), None, 100)
    assert len(everything) == 7
    assert [j.id for j in everything][:6] == ids[::-1]  # newest first
    first = store.find(JobFilter(), None, 3)
    rest = store.find(JobFilter(), Position.of(first[-1]), 100)
    assert [j.id for j in first + rest] == [j.id for j in everything]
    in_a = store.find(JobFilter.of(queue="a"), None, 100)
    assert [j.id for j in in_a] == [ids[5], ids[3], ids[1]]
    assert [j.id for j in store.find(JobFilter.of(status="failed"), None, 100)] == [failed]
    assert [j.id for j in store.find(JobFilter.of(error_type="Boom"), None, 100)] == [failed]
    two = store.find(JobFilter.of(status=["failed", "pending"], queue="b"), None, 100)
    assert [j.id for j in two] == [ids[4], ids[2], ids[0]]
    window = JobFilter.of(
        created_after=base + timedelta(minutes=1), created_before=base + timedelta(minutes=3)
    )
    assert [j.id for j in store.find(window, None, 100)] == [ids[2], ids[1]]
    assert [j.job_type for j in store.find(JobFilter.of(owner_id="u-1"), None, 10)] == ["other"]
    finished = JobFilter.of(finished_after=timedelta(minutes=5))
    assert [j.id for j in store.find(finished, None, 100)] == [failed]


def test_a_pipeline_is_read_oldest_first(store: Store) -> None:
    root = new_job(store, now=ago(30))
    steps = [new_job(store, now=ago(20 - i), correlation_id=root) for i in range(2)]
    new_job(store)
    assert [j.id for j in store.pipeline(root)] == [root, *steps]
    assert store.pipeline("nobody") == []


def test_statistics_and_queue_health(store: Store) -> None:
    new_job(store, now=ago(120), queue_name="mail")
    new_job(store, now=ago(30), queue_name="mail")
    lapsed = new_job(store, queue_name="mail")
    claimed(store, lapsed, lease_s=-10)
    failed = new_job(store, queue_name="ocr")
    assert store.fail(
        claimed(store, failed),
        AttemptError(error_type="E", error_message="m", duration_ms=1, now=utcnow()),
    )
    stats = store.stats()
    assert stats["mail"]["counts"]["pending"] == 2 and stats["mail"]["total"] == 3
    assert stats["mail"]["counts"]["processing"] == 1
    assert 115 <= stats["mail"]["oldest_pending_age_s"] <= 180
    assert stats["ocr"]["counts"][JobStatus.FAILED.value] == 1
    assert stats["ocr"]["oldest_pending_age_s"] is None
    health = store.queue_health()
    assert health["mail"] == {"failed_last_hour": 0, "expired_leases": 1}
    assert health["ocr"] == {"failed_last_hour": 1, "expired_leases": 0}
    assert store.queue_health(since_s=-60).get("ocr", {}).get("failed_last_hour", 0) == 0
    clock = store.clock()
    assert abs((clock - utcnow()).total_seconds()) < 5 and clock.tzinfo is not None


def test_statistics_of_a_big_postgresql_table_sample_the_ended_statuses(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above ``ESTIMATE_ABOVE`` rows the ended counts come from a block sample scaled to
    the planner's estimate, the active ones from an exact count; a sample of the whole
    table (a small one) gives the exact answer, so both ways agree here."""
    if not backend.name.startswith("postgres"):
        pytest.skip("estimates are PostgreSQL's only")
    store = backend.store
    for queue in ("mail", "mail", "ocr"):
        new_job(store, queue_name=queue)
    failed = new_job(store, queue_name="ocr")
    assert store.fail(
        claimed(store, failed),
        AttemptError(error_type="E", error_message="m", duration_ms=1, now=utcnow()),
    )
    done = new_job(store, queue_name="mail")
    assert store.complete(
        claimed(store, done), Completion(result_json=None, duration_ms=1, now=utcnow())
    )
    exact = store.stats()
    assert isinstance(store, JobStore)
    with store.engines.transaction() as conn:
        conn.execute(text("ANALYZE background_jobs"))
    monkeypatch.setattr(reads, "ESTIMATE_ABOVE", 0)
    sampled = store.stats()
    for queue in ("mail", "ocr"):
        assert sampled[queue]["counts"] == exact[queue]["counts"]
        assert sampled[queue]["total"] == exact[queue]["total"]
    assert sampled["ocr"]["counts"]["failed"] == 1 and sampled["mail"]["counts"]["pending"] == 2
    assert sampled["mail"]["counts"]["completed"] == 1 and sampled["mail"]["total"] == 3
    monkeypatch.setattr(reads, "EXACT_BELOW", 0)  # every ended group from the sample
    assert {q: e["counts"] for q, e in store.stats().items()} == {
        q: e["counts"] for q, e in exact.items()
    }
