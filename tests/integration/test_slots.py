"""Concurrency keys on PostgreSQL, SQLite and MariaDB, and the rate limiter's Lua script on
a real Redis (issue 8, item 3)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis

from celery_tracked.backends.limiter import RedisLimiter
from celery_tracked.core.fences import Completion, Lease, Takeover
from celery_tracked.core.jobs import Claim, utcnow
from celery_tracked.store import JobStore, migrate

from .conftest import insert_job


@pytest.fixture(params=["postgres", "sqlite", "mariadb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'slots.sqlite3'}"
    else:
        url = str(request.getfixturevalue(f"{request.param}_url"))
    migrate.upgrade(url)
    store = JobStore(url)
    yield store
    store.dispose()


def new_job(store: JobStore, key: str | None) -> str:
    return insert_job(store, concurrency_key=key)


def claim(store: JobStore, job_id: str, key: str, limit: int, lease_s: float = 60) -> Any:
    return store.claim(
        job_id,
        Lease(owner="h:1", worker="w", now=utcnow(), lease_s=lease_s, concurrency=(key, limit)),
    )


def test_a_key_admits_its_limit_of_running_jobs(store: JobStore) -> None:
    a, b, c = (new_job(store, "course:1") for _ in range(3))
    other = new_job(store, "course:2")
    assert store.get(a).concurrency_key == "course:1"  # type: ignore[union-attr]
    assert isinstance(claim(store, a, "course:1", 2), Claim)
    assert isinstance(claim(store, b, "course:1", 2), Claim)
    assert store.key_busy(c, "course:1", 2)
    assert claim(store, c, "course:1", 2) is None
    assert not store.key_busy(a, "course:1", 2)  # a job never waits for itself
    assert isinstance(claim(store, other, "course:2", 1), Claim)
    # the slot is the lease: a completed job frees it
    done = store.complete(Claim(a, 1, 3), Completion(result_json=None, now=utcnow(), duration_ms=1))
    assert done and isinstance(claim(store, c, "course:1", 2), Claim)


def test_a_lapsed_lease_frees_its_slot_and_its_own_takeover_is_not_blocked(
    store: JobStore,
) -> None:
    dead, waiting = new_job(store, "k"), new_job(store, "k")
    assert isinstance(claim(store, dead, "k", 1, lease_s=0.5), Claim)
    assert claim(store, waiting, "k", 1) is None
    time.sleep(0.7)  # the holder's worker died: nothing renews its lease
    assert not store.key_busy(waiting, "k", 1)
    assert isinstance(claim(store, waiting, "k", 1), Claim)
    # the dead job's redelivery may not take its own row over while another holds the key
    lease = Lease(owner="h:2", worker="w", now=utcnow(), lease_s=60)
    fence = Takeover(seen_attempt=1, grace_s=0.0, stale_owner=None, reason="lost")
    assert store.take_over(dead, replace(lease, concurrency=("k", 1)), fence) is None
    assert store.take_over(dead, replace(lease, concurrency=("k", 2)), fence) is not None


def test_concurrent_claims_of_one_key_never_both_pass(store: JobStore) -> None:
    """Eight threads, eight jobs of one key, limit 1, five rounds: one claim per round."""

    def one(job_id: str, barrier: threading.Barrier, won: list[str]) -> None:
        barrier.wait()
        if claim(store, job_id, "race", 1) is not None:
            won.append(job_id)

    for _ in range(5):
        jobs = [new_job(store, "race") for _ in range(8)]
        barrier = threading.Barrier(len(jobs))
        won: list[str] = []
        threads = [threading.Thread(target=one, args=(j, barrier, won)) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1, won
        store.complete(
            Claim(won[0], 1, 3), Completion(result_json=None, now=utcnow(), duration_ms=1)
        )


def test_the_lua_limiter_reserves_slots_on_redis_time(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    limiter = RedisLimiter(client, "ct")
    assert limiter.key("ai") == "ct:limiter:{ai}"  # hash-tagged: one Cluster slot
    client.hset("ct:limiter:{ai}", "next", 0)  # a used limiter (an empty one waits first)
    wait, first = limiter.take("ai", 500, None)
    assert wait == 0
    wait_b, slot_b = limiter.take("ai", 500, None)
    wait_c, slot_c = limiter.take("ai", 500, None)
    assert (slot_b - first, slot_c - first) == (500, 1000)
    assert 400 < wait_b <= 500 and 900 < wait_c <= 1000
    assert limiter.take("ai", 500, slot_b)[1] == slot_b  # its own slot: no new reservation
    nxt = float(client.hget("ct:limiter:{ai}", "next"))  # type: ignore[arg-type]
    assert first + 1499 < nxt <= first + 1500  # Redis TIME to the microsecond
    assert limiter.grant("ai", 500, first) == 0  # the first delivery's start
    time.sleep(wait_b / 1000 + 0.05)  # and the first start's interval (granted after its take)
    assert limiter.take("ai", 500, slot_b)[0] == 0
    assert limiter.grant("ai", 500, slot_b) == 0
    last = float(client.hget("ct:limiter:{ai}", "last"))  # type: ignore[arg-type]
    assert last >= slot_b - 1
    assert 0 < client.pttl("ct:limiter:{ai}") <= 500 + 500 + 86_400_000 + 1000
    assert limiter.take("other", 500, None)[0] == 500  # independent (and new: it waits)
    client.close()
