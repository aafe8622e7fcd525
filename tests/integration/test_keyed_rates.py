"""Keyed rate limits' Lua script on a real Redis, step for step with the in-process twin
(``core/rates.decide``) (issue 27, item 1)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from celery_tracked.backends.limiter import MemoryLimiter, RedisLimiter
from celery_tracked.core.rates import Turn

Limiter = RedisLimiter | MemoryLimiter


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def both(client: redis.Redis) -> list[Limiter]:
    return [RedisLimiter(client, "ct"), MemoryLimiter()]


def test_the_script_decides_as_the_twin(client: redis.Redis) -> None:
    for limiter in both(client):
        one = (Turn("t:1", 1, 1000.0),)  # 1/s
        assert limiter.turns(one)[0] == 0  # a new key: room in its window
        wait, (second,) = limiter.turns(one)
        assert 990 <= wait <= 1000, limiter
        wait, (third,) = limiter.turns(one)
        assert 1990 <= wait <= 2000 and third.slot_ms == second.slot_ms + 1000  # type: ignore[operator]
        wait, (again,) = limiter.turns((second,))  # back early: waits for room, its place kept
        assert 990 <= wait <= 1000 and again.slot_ms == second.slot_ms
        burst = (Turn("t:2", 3, 1000.0, burst=3),)
        assert [limiter.turns(burst)[0] for _ in range(3)] == [0, 0, 0]
        assert 990 <= limiter.turns(burst)[0] <= 1000  # the window is full
        pair = (Turn("t:3", 1, 1000.0), Turn("t:1", 1, 1000.0))
        wait, made = limiter.turns(pair)  # t:1's line is 3 s long: both wait for it
        assert 2990 <= wait <= 3000 and made[0].slot_ms == made[1].slot_ms
        # a fresh delivery takes the room its window has now, even with one waiting in line
        assert limiter.turns((Turn("t:3", 1, 1000.0),))[0] == 0
        units = (Turn("t:4", 4, 1000.0, burst=4, units=3),)
        assert limiter.turns(units)[0] == 0
        assert limiter.turns((Turn("t:4", 4, 1000.0, burst=4, units=2),))[0] > 900


def test_the_script_keeps_no_key_forever(client: redis.Redis) -> None:
    limiter = RedisLimiter(client, "ct")
    assert limiter.rate_key("ai:t1") == "ct:rate:{rate}:line:ai:t1"  # one Cluster slot for all
    limiter.turns((Turn("ai:t1", 20, 1000.0),))
    for part in ("line", "grants", "plans"):
        key = limiter.rate_key("ai:t1", part)
        assert 0 < client.pttl(key) <= 1000 + 1000 + 60_000 + 100, key
    assert client.zcard(limiter.rate_key("ai:t1", "grants")) == 1


def hammer(limiter: Limiter, turn: Turn, threads: int, seconds: float) -> list[float]:
    """Threads asking as ``KeyedRateLimit`` does; the Redis time of each grant."""
    grants: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def one() -> None:
        mine = turn
        while time.monotonic() < deadline:
            wait, (mine,) = limiter.turns((mine,))
            if wait == 0:
                with lock:
                    grants.append(time.time())
                mine = turn  # the next job: a fresh delivery
            else:
                time.sleep(wait / 1000)

    workers = [threading.Thread(target=one) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sorted(grants)


@pytest.mark.parametrize("which", ["redis", "memory"])
def test_many_askers_get_the_rate_and_never_more(client: redis.Redis, which: str) -> None:
    limiter: Limiter = RedisLimiter(client, "ct") if which == "redis" else MemoryLimiter()
    grants = hammer(limiter, Turn("k", 10, 1000.0), threads=6, seconds=3.0)
    # the grant is recorded on Redis's clock; this side reads its own clock after the
    # reply, a few ms later: a window of 1 s less that holds at most the limit
    windows = [sum(1 for g in grants if at <= g < at + 0.97) for at in grants]
    assert max(windows) <= 10, windows
    assert 28 <= len(grants) <= 31  # 10/s for 3 s
