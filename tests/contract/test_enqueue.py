"""The producer's role (``EnqueueStore``, ``Handing``): insert, duplicate keys, undo,
hand-over, a countdown/eta on the row, a debounce's moves, sealed values kept and moved."""

from __future__ import annotations

from datetime import timedelta

import pytest

from celery_tracked.core.errors import DuplicateJob
from celery_tracked.core.jobs import JobStatus, utcnow
from celery_tracked.core.keys import UndoneReplace
from celery_tracked.core.ports import Store
from tests.conftest import wait_for
from tests.contract.conftest import event_names, new_job, sealed


def _due_in(store: Store, job_id: str) -> float:
    job = store.get(job_id)
    assert job is not None and job.not_before is not None
    return (job.not_before - store.clock()).total_seconds()


def test_an_inserted_job_reads_back_pending_with_its_enqueued_event(store: Store) -> None:
    job_id = new_job(store, idempotency_key="k-1", owner_id="u-7")
    job = store.get(job_id)
    assert job is not None
    assert (job.status, job.attempts_made, job.max_attempts) == (JobStatus.PENDING, 0, 3)
    assert (job.idempotency_key, job.owner_id, job.key_round, job.revision) == ("k-1", "u-7", 0, 0)
    assert job.published_at is None and job.locked_until is None and job.not_before is None
    [enqueued] = store.events(job_id)
    assert (enqueued.event, enqueued.status, enqueued.attempt) == ("enqueued", JobStatus.PENDING, 0)
    assert store.get("no-such-job") is None


def test_a_taken_key_or_id_is_a_duplicate_and_a_new_round_is_not(store: Store) -> None:
    first = new_job(store, idempotency_key="k-1")
    with pytest.raises(DuplicateJob):
        new_job(store, idempotency_key="k-1")
    with pytest.raises(DuplicateJob):
        new_job(store, id=first)
    second = new_job(store, idempotency_key="k-1", key_round=1)
    other_type = new_job(store, idempotency_key="k-1", job_type="other")
    new_job(store)  # no key: never a duplicate
    new_job(store)
    newest = store.find_by_key("t", "k-1")
    assert newest is not None and (newest.id, newest.key_round) == (second, 1)
    assert [e.event for e in store.events(first)] == ["enqueued"]
    found = store.find_by_key("other", "k-1")
    assert found is not None and found.id == other_type
    assert store.find_by_key("t", "k-2") is None


def test_undo_removes_an_unpublished_job_with_its_history(store: Store) -> None:
    job_id = new_job(store)
    assert store.undo(job_id)
    assert store.get(job_id) is None and store.events(job_id) == []
    kept = new_job(store)
    assert store.handed_over(kept, utcnow())
    assert not store.undo(kept)  # handed over meanwhile: it stays, and will run
    assert store.get(kept) is not None


def test_a_hand_over_is_recorded_once_and_only_for_the_current_revision(store: Store) -> None:
    job_id = new_job(store)
    assert not store.handed_over(job_id, utcnow(), revision=1)
    assert store.handed_over(job_id, utcnow(), revision=0)
    first = store.get(job_id)
    assert first is not None and first.published_at is not None
    assert not store.handed_over(job_id, utcnow(), revision=0)
    again = store.get(job_id)
    assert again is not None and again.published_at == first.published_at
    assert event_names(store, job_id) == ["enqueued"]  # no event for a hand-over


def test_a_hand_over_noted_without_waiting_lands_like_one_that_waits(store: Store) -> None:
    job_id, stale = new_job(store), new_job(store)
    store.note_handed_over(stale, utcnow(), revision=1)  # not the current message: no mark
    store.note_handed_over(job_id, utcnow(), revision=0)  # sent after the first's answer

    def marked() -> bool:
        job = store.get(job_id)
        return job is not None and job.published_at is not None

    wait_for(marked, timeout=10)  # PostgreSQL: the answer is read at the next statement
    unmarked = store.get(stale)
    assert unmarked is not None and unmarked.published_at is None
    assert not store.handed_over(job_id, utcnow(), revision=0)  # recorded once
    assert event_names(store, job_id) == ["enqueued"]


def test_a_debounce_replaces_a_pending_job_and_its_undo_moves_on(store: Store) -> None:
    job_id = new_job(store)
    now = utcnow()
    replaced = store.replace_arguments(
        job_id, seen_revision=0, payload_json='{"args": [2]}', now=now, message="debounced"
    )
    assert replaced
    job = store.get(job_id)
    assert job is not None and (job.revision, job.payload_json) == (1, '{"args": [2]}')
    assert not store.replace_arguments(
        job_id, seen_revision=0, payload_json="{}", now=now, message="stale"
    )
    assert not store.undo_replace(  # revision 0's message is not the one made
        job_id, 0, UndoneReplace(revision=2, payload_json="{}"), now=now, message="x"
    )
    assert store.undo_replace(
        job_id,
        1,
        UndoneReplace(revision=2, payload_json='{"args": [1]}'),
        now=now,
        message="undone",
    )
    job = store.get(job_id)
    assert job is not None and (job.revision, job.payload_json) == (2, '{"args": [1]}')
    assert event_names(store, job_id) == ["enqueued", "debounced", "debounce_undone"]
    assert store.events(job_id)[1].message == "debounced"


def test_a_countdown_is_counted_on_the_stores_clock_an_eta_kept(store: Store) -> None:
    by_countdown = new_job(store, due_in_s=600)
    eta = (utcnow() + timedelta(hours=2)).replace(microsecond=0)
    by_eta = new_job(store, due_at=eta)
    at_once = new_job(store)
    assert 590 < _due_in(store, by_countdown) <= 600
    by_eta_job, at_once_job = store.get(by_eta), store.get(at_once)
    assert by_eta_job is not None and by_eta_job.not_before == eta
    assert at_once_job is not None and at_once_job.not_before is None


def test_a_debounce_gives_the_job_its_new_messages_due_time(store: Store) -> None:
    job_id = new_job(store, due_in_s=60)
    assert store.replace_arguments(
        job_id, seen_revision=0, payload_json="{}", now=utcnow(), message="x", due_in_s=600
    )
    assert 590 < _due_in(store, job_id) <= 600  # pushed later by the newest countdown
    assert store.replace_arguments(
        job_id, seen_revision=1, payload_json="{}", now=utcnow(), message="y"
    )
    job = store.get(job_id)
    assert job is not None and job.not_before is None  # the newest message: at once


def test_a_new_row_keeps_its_sealed_values_and_a_replacement_and_its_undo_move_them(
    store: Store,
) -> None:
    job_id = new_job(store, secrets_sealed="gAAAA-first")
    assert sealed(store, job_id) == "gAAAA-first"
    assert new_job(store) and sealed(store, new_job(store)) is None  # none given: NULL
    now = utcnow()
    assert store.replace_arguments(
        job_id, seen_revision=0, payload_json="{}", now=now, message="d", secrets_sealed="gB"
    )
    assert sealed(store, job_id) == "gB"
    undo = UndoneReplace(revision=2, payload_json="{}", secrets_sealed="gAAAA-first")
    assert store.undo_replace(job_id, 1, undo, now=now, message="undone")
    assert sealed(store, job_id) == "gAAAA-first"
    assert store.replace_arguments(  # a replacement without a secret clears it
        job_id, seen_revision=2, payload_json="{}", now=now, message="d"
    )
    assert sealed(store, job_id) is None
