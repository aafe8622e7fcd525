"""The action log role (``ActionStore``): one entry per action done by hand, newest first
by id, and an ``action`` event on each job it changed (issue 28)."""

from __future__ import annotations

from celery_tracked.core.ports import Store
from tests.contract.conftest import event_names, new_job


def _row(action: str, changed: int = 0, refused: int = 0) -> dict[str, object]:
    return {
        "actor": "alice",
        "role": "admin",
        "action": action,
        "target": "q",
        "changed": changed,
        "refused": refused,
        "detail": "x: it is completed" if refused else None,
        "message": f"{action} by alice (admin)",
    }


def test_an_action_is_logged_with_an_event_on_each_job_it_changed(store: Store) -> None:
    first, second = new_job(store), new_job(store)
    key = store.record_action(_row("cancel_many", changed=2), [first, second, "gone-job"])
    assert key > 0
    for job_id in (first, second):
        assert event_names(store, job_id) == ["enqueued", "action"]
        note = store.events(job_id)[-1]
        assert note.message == "cancel_many by alice (admin)"
        assert note.status.value == "pending"  # the job's status as it is
    [entry] = store.actions(None, 10)
    assert (entry.id, entry.actor, entry.role, entry.action) == (
        key,
        "alice",
        "admin",
        "cancel_many",
    )
    assert (entry.changed, entry.refused, entry.detail) == (2, 0, None)
    assert abs((entry.created_at - store.clock()).total_seconds()) < 5  # the store's clock


def test_the_log_pages_newest_first_by_id(store: Store) -> None:
    keys = [store.record_action(_row(f"pause{i}", refused=i % 2), []) for i in range(5)]
    assert keys == sorted(keys)
    first = store.actions(None, 2)
    assert [a.action for a in first] == ["pause4", "pause3"]
    rest = store.actions(first[-1].id, 10)
    assert [a.action for a in rest] == ["pause2", "pause1", "pause0"]
    assert store.actions(rest[-1].id, 10) == []
    assert rest[1].detail == "x: it is completed"
