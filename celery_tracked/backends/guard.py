"""The enqueue-time idempotency guard, and terminal-status notifications.

``RedisGuard`` takes a key with one atomic script (``GET`` or ``SET NX PX``) holding a
token (the job id) and releases it by compare-and-delete, so a producer can only ever
remove its own key. Each script touches one key (Redis Cluster safe). ``MemoryGuard`` is
the in-process twin for the embedded mode (``tracked_redis_url = "memory://"``): it only
guards producers inside one process. Knows nothing of Celery or SQL.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import redis

from ..core.errors import GuardError as GuardError  # re-exported: its home is errors.py
from ..core.guards import Guard as Guard  # re-exported: the Protocols live in guards.py
from ..core.guards import Notifier as Notifier
from ..core.guards import Subscription as Subscription
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


@contextmanager
def translated(action: str) -> Iterator[None]:
    try:
        yield
    except redis.RedisError as exc:
        raise GuardError(f"Redis {action} failed: {mask_url(str(exc))}") from None


class RedisGuard:
    """Guard and notifier on a real Redis. The client pool is fork-safe (redis-py)."""

    def __init__(self, url: str, prefix: str) -> None:
        self.prefix = prefix
        self.client: redis.Redis = redis.Redis.from_url(
            url, socket_connect_timeout=2.0, socket_timeout=5.0, decode_responses=True
        )
        self._acquire = self.client.register_script(_ACQUIRE)
        self._release = self.client.register_script(_RELEASE)
        self._publisher = _Publisher(self.client.connection_pool)

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def acquire(self, key: str, token: str, ttl_ms: int) -> str | None:
        with translated("guard acquire"):
            held = self._acquire(keys=[key], args=[token, ttl_ms])
        return None if held is None else str(held)

    def release(self, key: str, token: str) -> bool:
        with translated("guard release"):
            return bool(self._release(keys=[key], args=[token]))

    def holder(self, key: str) -> str | None:
        with translated("guard read"):
            value = self.client.get(key)
        return None if value is None else str(value)

    def release_all(self, entries: Iterable[tuple[str, str]]) -> int:
        """Compare-and-delete every ``(key, token)`` in one round trip (the release
        script, pipelined: each call touches one key); how many keys were deleted.
        The cleanup drops the guard entries of the jobs it removed with it."""
        pairs = list(entries)
        if not pairs:
            return 0
        with translated("guard release"):
            sha = self.client.script_load(_RELEASE)
            pipe = self.client.pipeline(transaction=False)
            for key, token in pairs:  # raw EVALSHA: half the client CPU of a Script call
                pipe.execute_command("EVALSHA", sha, 1, key, token)  # type: ignore[no-untyped-call]
            return sum(int(n) for n in pipe.execute())

    def publish(self, job_id: str, status: str) -> None:
        self._publisher.publish(self.key("job", job_id), status)

    def subscribe(self, job_id: str) -> Subscription:
        with translated("subscribe"):
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            pubsub.subscribe(self.key("job", job_id))
        return _RedisSubscription(pubsub)

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

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._local = threading.local()

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
            raise GuardError(f"Redis publish failed: {mask_url(str(exc))}") from None


def _publish_command(channel: str, message: str) -> bytes:
    """``PUBLISH channel message`` in RESP, packed by hand (redis-py's generic packer costs
    more than the rest of the call)."""
    c, m = channel.encode(), message.encode()
    return b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(c), c, len(m), m)


class _RedisSubscription:
    def __init__(self, pubsub: Any) -> None:
        self._pubsub = pubsub

    def wait(self, timeout: float) -> bool:
        with translated("subscription"):
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
