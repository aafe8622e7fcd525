"""The throughput's read (``ReadStore.ended_runs``): the newest jobs ended within a
window, newest first, at most a limit; never a waiting or running job (issue 28)."""

from __future__ import annotations

from celery_tracked.core.ports import Store
from tests.contract.conftest import claimed, completed, new_job


def test_the_newest_ended_jobs_within_the_window(store: Store) -> None:
    recent = [completed(store, seconds_ago=s, queue_name="mail") for s in (30, 10, 20)]
    completed(store, seconds_ago=7200, queue_name="mail")  # outside the hour
    new_job(store)  # pending
    claimed(store, new_job(store))  # running
    found = store.ended_runs(3600, 10)
    assert len(found) == 3
    assert [r.finished_at for r in found] == sorted((r.finished_at for r in found), reverse=True)
    assert {r.queue_name for r in found} == {"mail"} and {r.status for r in found} == {"completed"}
    assert all(r.started_at is not None for r in found)  # each ran
    newest = store.get(recent[1])
    assert newest is not None and found[0].finished_at == newest.finished_at
    assert len(store.ended_runs(3600, 2)) == 2  # at most the limit
    assert len(store.ended_runs(8000, 10)) == 4
