"""The maintenance activity role (``MaintenanceStore``): one row per plugin, written by one
upsert per pass: the last pass replaces the row's last-pass fields, the totals add up
(issue 28)."""

from __future__ import annotations

from celery_tracked.core.maintenance import Pass
from celery_tracked.core.ports import Store


def test_a_first_pass_inserts_the_plugins_row_on_the_stores_clock(store: Store) -> None:
    assert store.maintenance() == []
    store.record_maintenance(Pass("relay", {"published": 2, "left": 1}, 2, None, 1.5))
    [run] = store.maintenance()
    assert (run.name, run.counts, run.jobs, run.error, run.failed) == (
        "relay",
        {"left": 1, "published": 2},
        2,
        None,
        False,
    )
    assert (run.passes, run.failures, run.jobs_total) == (1, 0, 2)
    assert run.ended_at is not None and abs((run.ended_at - store.clock()).total_seconds()) < 5
    assert run.duration_s is not None and abs(run.duration_s - 1.5) < 0.01
    assert run.since == run.ended_at


def test_later_passes_replace_the_last_pass_and_add_to_the_totals(store: Store) -> None:
    store.record_maintenance(Pass("reap", {"rescued": 3}, 3, None, 0.0))
    first = store.maintenance()[0]
    store.record_maintenance(Pass("reap", {}, 0, "StoreError: the database failed", 0.2))
    store.record_maintenance(Pass("cleanup", {"total": 7}, 7, None, 0.1))
    store.record_maintenance(Pass("reap", {"rescued": 1, "abandoned": 1}, 2, None, 0.0))
    cleanup, reap = store.maintenance()  # by name
    assert (cleanup.name, cleanup.passes, cleanup.jobs_total) == ("cleanup", 1, 7)
    assert (reap.counts, reap.jobs, reap.error) == ({"rescued": 1, "abandoned": 1}, 2, None)
    assert (reap.passes, reap.failures, reap.jobs_total) == (3, 1, 5)
    assert reap.since == first.since  # the totals count from the first pass
    assert reap.ended_at is not None and first.ended_at is not None
    assert reap.ended_at >= first.ended_at


def test_a_failed_pass_keeps_its_error(store: Store) -> None:
    store.record_maintenance(Pass("probe", {}, 0, "StoreError: no database", 0.0))
    [run] = store.maintenance()
    assert (run.failed, run.error, run.passes, run.failures) == (
        True,
        "StoreError: no database",
        1,
        1,
    )
