"""The enqueue-time idempotency guard, and terminal-status notifications.

``RedisGuard`` takes a key with one atomic script (``GET`` or ``SET NX PX``) holding a
token (the job id) and releases it by compare-and-delete, so a producer can only ever
remove its own key. Each script touches one key (Redis Cluster safe). ``MemoryGuard`` is
the in-process twin for the embedded mode (``tracked_redis_url = "memory://"``): it only
guards producers inside one process. Knows nothing of Celery or SQL.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import redis

from ..core.errors import GuardError as GuardError  # re-exported: its home is errors.py
from ..core.guard import Guard as Guard  # re-exported: the Protocols live in core/guard.py
from ..core.guard import Notifier as Notifier
from ..core.guard import Subscription as Subscription
from ..core.redact import mask_url

_ACQUIRE = """
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


logger = logging.getLogger("celery_tracked")


class Health:
    """Whether this process reaches the guard's Redis, said once per outage: one WARNING
    at the first failure (the callers meanwhile: an enqueue with a key fails, a waiter
    polls the row, a notification is not sent; each logs at DEBUG only), one line when a
    command succeeds again. Per process: a forked child starts with nothing said."""

    def __init__(self, url: str) -> None:
        self.url = mask_url(url)
        self._lock = threading.Lock()
        self._down_in = 0  # the pid of the process that said "unreachable"

    @property
    def down(self) -> bool:
        return self._down_in == os.getpid()

    def failed(self, action: str, exc: BaseException) -> None:
        with self._lock:
            first, self._down_in = not self.down, os.getpid()
        if first:
            logger.warning(
                "celery-tracked: the Redis of the idempotency guard (%s) is unreachable (%s "
                "failed: %s): enqueues with an idempotency key fail, waiters read the "
                "database instead of being notified (said once per process until it answers again)",
                self.url,
                action,
                mask_url(str(exc)),
            )

    def ok(self) -> None:
        if not self.down:  # the hot path: no lock
            return
        with self._lock:
            was, self._down_in = self.down, 0
        if was:
            logger.warning(
                "celery-tracked: the Redis of the idempotency guard (%s) is reachable again",
                self.url,
            )


@contextmanager
def translated(action: str, health: Health | None = None) -> Iterator[None]:
    try:
        yield
    except redis.RedisError as exc:
        if health is not None and not isinstance(exc, redis.ResponseError):
            health.failed(action, exc)
        raise GuardError(f"Redis {action} failed: {mask_url(str(exc))}") from None
    if health is not None:
        health.ok()


class RedisGuard:
    """Guard and notifier on a real Redis. The client pool is fork-safe (redis-py)."""

    def __init__(self, url: str, prefix: str) -> None:
        self.prefix = prefix
        self.client: redis.Redis = redis.Redis.from_url(
            url, socket_connect_timeout=2.0, socket_timeout=5.0, decode_responses=True
        )
        self._acquire = self.client.register_script(_ACQUIRE)
        self._release = self.client.register_script(_RELEASE)
        self.health = Health(url)
        self._publisher = _Publisher(self.client.connection_pool, self.health)

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def acquire(self, key: str, token: str, ttl_ms: int) -> str | None:
        with translated("guard acquire", self.health):
            held = self._acquire(keys=[key], args=[token, ttl_ms])
        return None if held is None else str(held)

    def release(self, key: str, token: str) -> bool:
        with translated("guard release", self.health):
            return bool(self._release(keys=[key], args=[token]))

    def holder(self, key: str) -> str | None:
        with translated("guard read", self.health):
            value = self.client.get(key)
        return None if value is None else str(value)

    def release_all(self, entries: Iterable[tuple[str, str]]) -> int:
        """Compare-and-delete every ``(key, token)`` in one round trip (the release
        script, pipelined: each call touches one key); how many keys were deleted.
        The cleanup drops the guard entries of the jobs it removed with it."""
        pairs = list(entries)
        if not pairs:
            return 0
        with translated("guard release", self.health):
            sha = self.client.script_load(_RELEASE)
            pipe = self.client.pipeline(transaction=False)
            for key, token in pairs:  # raw EVALSHA: half the client CPU of a Script call
                pipe.execute_command("EVALSHA", sha, 1, key, token)  # type: ignore[no-untyped-call]
            return sum(int(n) for n in pipe.execute())

    def publish(self, job_id: str, status: str) -> None:
        self._publisher.publish(self.key("job", job_id), status)

    def subscribe(self, job_id: str) -> Subscription:
        with translated("subscribe", self.health):
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            pubsub.subscribe(self.key("job", job_id))
        return _RedisSubscription(pubsub, self.health)

    def eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy``, or None when ``CONFIG GET`` is refused."""
        try:
            value: Any = self.client.config_get("maxmemory-policy")
        except redis.ResponseError:
            return None
        except redis.RedisError as exc:
            raise GuardError(f"Redis check failed: {mask_url(str(exc))}") from None
        return str(value.get("maxmemory-policy")) if value else None

    def close(self) -> None:
        self.client.close()


class _Publisher:
    """``PUBLISH`` on a connection of its own per thread, without waiting for the reply.

    The worker publishes once per finished job, on its hot path; the reply (a receiver
    count nobody needs) is read just before the next command on that connection, so the
    job never waits for Redis, and the client does half the work of a full command.
    """

    def __init__(self, pool: Any, health: Health) -> None:
        self._pool = pool
        self._local = threading.local()
        self._health = health

    def publish(self, channel: str, message: str) -> None:
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None and getattr(local, "pid", None) != os.getpid():
            conn = None  # inherited across a fork: never touch the parent's socket
        try:
            if conn is None:
                conn = self._pool.make_connection()
                conn.connect()
                local.conn, local.pid, local.pending = conn, os.getpid(), False
            if local.pending:
                conn.read_response()
            conn.send_packed_command([_publish_command(channel, message)], False)
            local.pending = True
        except (redis.RedisError, OSError) as exc:
            local.conn = None
            if conn is not None:
                conn.disconnect()
            self._health.failed("publish", exc)
            raise GuardError(f"Redis publish failed: {mask_url(str(exc))}") from None
        self._health.ok()


def _publish_command(channel: str, message: str) -> bytes:
    """``PUBLISH channel message`` in RESP, packed by hand (redis-py's generic packer costs
    more than the rest of the call)."""
    c, m = channel.encode(), message.encode()
    return b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(c), c, len(m), m)


class _RedisSubscription:
    def __init__(self, pubsub: Any, health: Health) -> None:
        self._pubsub = pubsub
        self._health = health

    def wait(self, timeout: float) -> bool:
        with translated("subscription", self._health):
            message = self._pubsub.get_message(timeout=max(0.0, timeout))
        return message is not None

    def close(self) -> None:
        self._pubsub.close()


class MemoryGuard:
    """In-process guard and notifier (embedded mode). Tokens expire like Redis keys."""

    def __init__(self, prefix: str = "celery_tracked") -> None:
        self.prefix = prefix
        self._keys: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._versions: dict[str, int] = {}

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def acquire(self, key: str, token: str, ttl_ms: int) -> str | None:
        with self._lock:
            held = self._live(key)
            if held is not None:
                return held
            self._keys[key] = (token, time.monotonic() + ttl_ms / 1000)
            return None

    def release(self, key: str, token: str) -> bool:
        with self._lock:
            if self._live(key) == token:
                del self._keys[key]
                return True
            return False

    def holder(self, key: str) -> str | None:
        with self._lock:
            return self._live(key)

    def release_all(self, entries: Iterable[tuple[str, str]]) -> int:
        return sum(self.release(key, token) for key, token in entries)

    def _live(self, key: str) -> str | None:
        entry = self._keys.get(key)
        if entry is None:
            return None
        if entry[1] <= time.monotonic():
            del self._keys[key]
            return None
        return entry[0]

    def publish(self, job_id: str, status: str) -> None:
        with self._changed:
            self._versions[job_id] = self._versions.get(job_id, 0) + 1
            self._changed.notify_all()

    def subscribe(self, job_id: str) -> Subscription:
        with self._lock:
            return _MemorySubscription(self, job_id, self._versions.get(job_id, 0))

    def eviction_policy(self) -> str | None:
        return "noeviction"

    def close(self) -> None:
        pass


class _MemorySubscription:
    def __init__(self, guard: MemoryGuard, job_id: str, seen: int) -> None:
        self._guard = guard
        self._job_id = job_id
        self._seen = seen

    def wait(self, timeout: float) -> bool:
        guard = self._guard
        with guard._changed:
            arrived = guard._changed.wait_for(
                lambda: guard._versions.get(self._job_id, 0) != self._seen, timeout=timeout
            )
            self._seen = guard._versions.get(self._job_id, 0)
        return bool(arrived)

    def close(self) -> None:
        pass
