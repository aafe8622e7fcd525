"""The memory store's own clock: leases and backoffs judged on the ``now`` it was given."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from celery_tracked.backends.memory import MemoryStore, conforms
from celery_tracked.core.errors import Refused, StoreError
from celery_tracked.core.fences import AttemptError, Lease, Takeover
from tests.contract.conftest import job_row
from tests.unit.job_rows import NOW


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


def test_leases_and_backoffs_follow_the_injected_clock() -> None:
    clock = Clock()
    store = MemoryStore(now=clock)
    row = job_row(now=NOW)
    store.insert(row)
    claim = store.claim(row["id"], Lease(owner="h:1:1", worker="w", now=NOW, lease_s=30))
    assert claim is not None and store.clock() == NOW
    job = store.get(row["id"])
    assert job is not None and job.locked_until == NOW + timedelta(seconds=30)
    fence = Takeover(seen_attempt=1, grace_s=5, stale_owner=None, reason="r")
    lease = Lease(owner="h:1:2", worker="w", now=NOW, lease_s=30)
    assert store.take_over(row["id"], lease, fence) is None
    clock.now = NOW + timedelta(seconds=36)  # expired more than the grace ago
    taken = store.take_over(row["id"], replace(lease, now=clock.now), fence)
    assert taken is not None and taken.attempt == 2
    failure = AttemptError(error_type="E", error_message="m", duration_ms=1, now=clock.now)
    assert store.retrying(taken, failure, delay_ms=10_000)
    assert (
        store.claim(row["id"], Lease(owner="h:1:3", worker="w", now=clock.now, lease_s=30)) is None
    )
    clock.now += timedelta(seconds=10)
    again = store.claim(row["id"], Lease(owner="h:1:3", worker="w", now=clock.now, lease_s=30))
    assert again is not None and again.attempt == 3
    assert store.events(row["id"])[-1].created_at == clock.now


def test_a_row_the_database_would_refuse_is_refused() -> None:
    store = MemoryStore()
    with pytest.raises(Refused):
        store.insert({**job_row(), "queue_name": None})
    with pytest.raises(Refused):
        store.insert({**job_row(), "no_such_column": 1})
    incomplete = job_row()
    del incomplete["owner_id"]
    with pytest.raises(StoreError):
        store.insert(incomplete)
    assert store.find_by_key("t", "k") is None and store.rows == {}
    assert conforms(store) is store
