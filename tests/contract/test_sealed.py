"""The store contract of ``secrets_sealed`` (issue 22, item 2): a new row keeps it, a
debounce's replacement and ``Tracker.retry`` set it with their arguments, and their undos
give the previous one back."""

from __future__ import annotations

from celery_tracked.core.jobs import JobStatus, utcnow
from celery_tracked.core.keys import UndoneReplace
from celery_tracked.core.moves import AttemptError, RetryUndo
from celery_tracked.core.ports import Store
from tests.contract.conftest import claimed, new_job


def sealed(store: Store, job_id: str) -> str | None:
    job = store.get(job_id)
    assert job is not None
    return job.secrets_sealed


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


def test_a_retry_seals_its_values_again_and_its_undo_gives_the_old_ones_back(
    store: Store,
) -> None:
    job_id = new_job(store, max_attempts=1, secrets_sealed="gOld")
    error = AttemptError(error_type="E", error_message="m", duration_ms=1, now=utcnow())
    assert store.fail(claimed(store, job_id), error, retries_exhausted=True)
    failed = store.get(job_id)
    assert failed is not None
    assert store.retry(
        job_id, seen_revision=0, budget=1, now=utcnow(), message="r", secrets_sealed="gNew"
    )
    assert sealed(store, job_id) == "gNew"
    undo = RetryUndo(1, JobStatus.FAILED, 1, failed.finished_at, True, "gOld")
    assert store.undo_retry(job_id, undo, now=utcnow(), message="publish failed")
    assert sealed(store, job_id) == "gOld"
