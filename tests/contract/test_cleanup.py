"""The cleanup's role (``CleanupStore``): batches, keep-newest boundaries."""

from __future__ import annotations

from datetime import timedelta

from celery_tracked.core.cleanup import Sweep
from celery_tracked.core.fences import AttemptError
from celery_tracked.core.jobs import PURGE_START, utcnow
from celery_tracked.core.ports import Store
from tests.contract.conftest import claimed, completed, later, new_job


def test_cleanup_removes_a_sweep_in_batches_with_the_rows_events(store: Store) -> None:
    old = [completed(store, 500 - i, idempotency_key=f"k{i}") for i in range(5)]
    other_queue = completed(store, 400, queue_name="other")
    failed = new_job(store)
    assert store.fail(
        claimed(store, failed),
        AttemptError(error_type="E", error_message="m", duration_ms=1, now=utcnow()),
    )
    pending = new_job(store)
    sweep = Sweep("completed", before=later(1), tasks=("app.t",))
    assert store.purge_count(sweep) == 6
    assert store.purge_count(Sweep("completed", before=utcnow() - timedelta(seconds=497.5))) == 3
    sizes, removed, cursor = [], [], PURGE_START
    while True:
        batch = store.purge_batch(sweep, cursor, 2)
        if batch.cursor is None:
            assert batch.removed == () and batch.events == 0
            break
        cursor = batch.cursor
        sizes.append(len(batch.removed))
        removed.extend(batch.removed)
        assert batch.events == 3 * len(batch.removed)  # enqueued, started, completed
    assert sizes == [2, 2, 2]
    assert [r.id for r in removed[:5]] == old  # oldest finished first
    assert removed[0].idempotency_key == "k0" and removed[0].job_type == "t"
    assert {r.id for r in removed} == {*old, other_queue}
    for job_id in old:
        assert store.get(job_id) is None and store.events(job_id) == []
    assert store.get(failed) is not None and store.get(pending) is not None
    assert store.purge_count(sweep) == 0


def test_keep_newest_boundaries_per_queue_and_status(store: Store) -> None:
    ids = [completed(store, 100 - i) for i in range(3)]
    completed(store, 50, queue_name="other")
    boundaries = dict(store.keep_boundaries(2))
    assert list(boundaries) == ["completed"]
    boundary = boundaries["completed"]
    assert (boundary.queue, boundary.id) == ("q", ids[1])  # the 2nd newest of queue q
    below = Sweep("completed", before=later(1), below=(boundary,))
    assert store.purge_count(below) == 1  # only the oldest, beyond the newest two
