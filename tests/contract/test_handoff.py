"""A freed concurrency slot handed to the key's next due waiting job (``HandOffStore``):
who may take it and in which order (oldest first, or round-robin by fairness key), the
hand-off's fences (a free slot, the revision read, the due time), and the claim of the
handed job."""

from __future__ import annotations

import threading
from datetime import datetime

from celery_tracked.core.fences import Completion, Lease
from celery_tracked.core.jobs import Job, JobStatus, utcnow
from celery_tracked.core.limits import SLOT_HANDED
from celery_tracked.core.ports import Store
from tests.contract.conftest import OWNER, WORKER, claimed, event_names, new_job

KEY = "tenant-1"


def waiting_job(store: Store, created: datetime | None = None, **values: object) -> str:
    """A pending job of ``KEY`` whose message is out."""
    job_id = new_job(store, concurrency_key=KEY, now=created or utcnow(), **values)
    assert store.handed_over(job_id, utcnow(), 0)
    return job_id


def ids(jobs: list[Job]) -> list[str]:
    return [j.id for j in jobs]


def test_the_next_waiting_jobs_are_the_due_ones_with_a_message_oldest_first(store: Store) -> None:
    ended = waiting_job(store)
    old, young = waiting_job(store), waiting_job(store)
    waiting_job(store, due_in_s=3600)  # not due: never handed a slot early
    new_job(store, concurrency_key=KEY)  # no message out yet (the producer's or the relay's)
    waiting_job(store, deadline_in_s=-1)  # past its deadline
    new_job(store, concurrency_key="tenant-2")
    assert ids(store.next_waiting(KEY, ended)) == [old, young]
    assert ids(store.next_waiting(KEY, old)) == [ended, young]


def test_a_handed_slot_is_held_for_its_job_and_only_its_new_message_claims_it(
    store: Store,
) -> None:
    running, first, second = waiting_job(store), waiting_job(store), waiting_job(store)
    claim = claimed(store, running, concurrency=(KEY, 1))
    [candidate, _] = store.next_waiting(KEY, running)
    assert store.hand_slot(candidate, 1, now=utcnow()) is None  # the key is full
    assert store.complete(claim, Completion(result_json=None, now=utcnow(), duration_ms=1))
    handed = store.hand_slot(candidate, 1, now=utcnow())
    assert handed is not None and (handed.id, handed.revision) == (first, 1)
    assert store.hand_slot(candidate, 2, now=utcnow()) is None  # that revision is gone
    job = store.get(first)
    assert job is not None and (job.locked_by, job.revision, job.published_at) == (
        SLOT_HANDED,
        1,
        None,
    )
    assert "slot_handed" in event_names(store, first)
    assert store.key_busy(second, KEY, 1)  # the handed slot is held
    lease = Lease(OWNER, WORKER, utcnow(), lease_s=60, concurrency=(KEY, 1))
    assert store.claim(second, lease) is None
    assert store.claim(first, lease) is None  # its older message runs nothing
    assert ids(store.next_waiting(KEY, running)) == [second]  # not handed twice
    assert store.handed_over(first, utcnow(), 1)
    assert claimed(store, first, concurrency=(KEY, 1), revision=1).attempt == 1
    job = store.get(first)
    assert job is not None and job.status is JobStatus.PROCESSING and job.locked_by == OWNER


def test_fair_hand_offs_go_round_robin_by_fairness_key(store: Store) -> None:
    a1, a2, a3 = (waiting_job(store, fairness_key="a") for _ in range(3))
    b1, b2 = (waiting_job(store, fairness_key="b") for _ in range(2))
    c1 = waiting_job(store, fairness_key="c")
    ended = new_job(store, concurrency_key=KEY)
    assert ids(store.next_waiting(KEY, ended, fair=True, fairness_key="a")) == [b1, b2, c1]
    assert ids(store.next_waiting(KEY, ended, fair=True, fairness_key="b")) == [c1, a1, a2]
    assert ids(store.next_waiting(KEY, ended, fair=True, fairness_key="c")) == [a1, a2, a3]
    assert ids(store.next_waiting(KEY, ended, fair=True, fairness_key=None)) == [a1, a2, a3]
    assert ids(store.next_waiting(KEY, ended)) == [a1, a2, a3]  # not fair: oldest first


def test_two_hand_offs_at_once_never_hand_to_one_job_nor_exceed_the_limit(store: Store) -> None:
    waiting = [waiting_job(store) for _ in range(4)]
    read = store.next_waiting(KEY, "nobody")
    got: list[Job] = []
    start = threading.Barrier(3)

    def hand() -> None:
        start.wait()
        for job in read:
            handed = store.hand_slot(job, 2, now=utcnow())
            if handed is not None:
                got.append(handed)
                return

    threads = [threading.Thread(target=hand) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(ids(got)) == sorted(waiting[:2])  # two slots, two jobs, each once
