"""What the bench apps and the harness share: URLs, task names, the counting body."""

from __future__ import annotations

import os
import time
from typing import Any

import redis

BROKER_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/1")
DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/ct_bench"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/1")
PEER_DATABASE_URL = os.environ.get(
    "BENCH_PEER_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/ct_bench_peer"
)
PEER_RESULT_BACKEND = "db+" + PEER_DATABASE_URL
QUEUE = "celery"
SLEEP_S = 0.010

#: (contender, kind) → task name
TASKS = {
    ("plain", "noop"): "bench.plain_noop",
    ("plain", "sleep_10ms"): "bench.plain_sleep",
    ("tracked", "noop"): "bench.tracked_noop",
    ("tracked", "sleep_10ms"): "bench.tracked_sleep",
    ("peer", "noop"): "bench.peer_noop",
    ("peer", "sleep_10ms"): "bench.peer_sleep",
}
#: contender → the ``-A`` of its worker
APPS = {"plain": "bench.app:app", "tracked": "bench.app:app", "peer": "bench.peer_app:app"}


def counter_key(task_name: str) -> str:
    return f"bench:count:{task_name}"


def target_key(task_name: str) -> str:
    return f"bench:target:{task_name}"


def stamp_key(task_name: str, n: int) -> str:
    return f"bench:stamp:{task_name}:{n}"


_client: redis.Redis | None = None
_client_pid = 0
_targets: dict[str, int] = {}


def redis_client() -> redis.Redis:
    """One client per process (pool children are forked)."""
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        _client = redis.Redis.from_url(REDIS_URL)
        _client_pid = os.getpid()
        _targets.clear()
    return _client


def count(task_name: str) -> None:
    """The one Redis round trip of every body (plus two timestamps per run)."""
    client = redis_client()
    n = int(client.incr(counter_key(task_name)))
    target = _targets.get(task_name)
    if target is None:
        raw: Any = client.get(target_key(task_name))
        target = _targets[task_name] = int(raw or 0)
    if n == 1 or n == target:
        client.set(stamp_key(task_name, n), repr(time.time()))
