"""The global rate limiter: one Redis hash per limiter, one Lua script per operation.

``RedisLimiter.take`` is :func:`~celery_tracked.limits.take_slot` run atomically in Redis
on the limiter's one key (``<prefix>:limiter:{<name>}``, hash-tagged: Redis Cluster
safe), with Redis ``TIME`` (to the microsecond) as the one clock of every worker;
``confirm`` records the start again once the claim is written, just before the body
(:func:`~celery_tracked.limits.started`), so the spacing holds between bodies, not only
between checks. ``MemoryLimiter`` is the in-process twin for the
embedded mode (``tracked_redis_url = "memory://"``).

:class:`GlobalRateLimit` is the built-in hook: a delivery whose slot has not come is
postponed (``before_claim``) to its slot's time, its reserved slot carried in the
re-published message, so it never reserves twice; no attempt is used and no pool process
waits (Celery holds a message with an ETA in the worker's memory). A slot reserved by a
delivery that never runs (its job cancelled, a duplicate) only wastes one interval. If
Redis is unreachable the delivery is postponed (a rate limit fails closed).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import redis

from .guard import GuardError, _translated
from .hooks import Delivery, Hooks, Wait
from .jobs import Claim
from .limits import LimiterState, slot_header, started, take_slot

logger = logging.getLogger("celery_tracked")

#: How long a delivery waits when the limiter cannot be reached.
UNAVAILABLE_WAIT_S = 1.0
#: A limiter's key outlives its last reserved slot by this much (ms).
_KEEP_MS = 60_000

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = tonumber(ARGV[1])
local nxt = tonumber(redis.call('HGET', KEYS[1], 'next'))
local last = tonumber(redis.call('HGET', KEYS[1], 'last'))
"""
_SAVE = f"""
redis.call('HSET', KEYS[1], 'next', nxt)
if last then redis.call('HSET', KEYS[1], 'last', last) end
redis.call('PEXPIRE', KEYS[1], math.ceil(math.max(nxt - now, 0) + interval + {_KEEP_MS}))
"""
#: limits.take_slot: ARGV = interval_ms, reserved slot (-1: none) -> {wait_ms, slot}
_TAKE = (
    _NOW
    + """
local reserved = tonumber(ARGV[2])
if not nxt then nxt = now end
if reserved < 0 then
  reserved = math.max(now, nxt)
  nxt = reserved + interval
end
local at = reserved
if last and last + interval > at then at = last + interval end
if at <= now then
  if not last or now > last then last = now end
  nxt = math.max(nxt, last + interval)
end
"""
    + _SAVE
    + """
if at > now then return {math.ceil(at - now), math.ceil(reserved)} end
return {0, math.ceil(reserved)}
"""
)
#: limits.started: ARGV = interval_ms -> now
_CONFIRM = (
    _NOW
    + """
if not nxt then nxt = now + interval end
if not last or now > last then last = now end
nxt = math.max(nxt, last + interval)
"""
    + _SAVE
    + "return math.floor(now)\n"
)


class Limiter(Protocol):
    def take(self, name: str, interval_ms: int, reserved_ms: int | None) -> tuple[int, int]:
        """``(wait_ms, slot_ms)``: 0 when the delivery may start now (recorded)."""

    def confirm(self, name: str, interval_ms: int) -> None:
        """Record a start now (the claim after a granted ``take`` was written)."""


class RedisLimiter:
    """The limiter on a real Redis (the guard's client)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.prefix = prefix
        self._take = client.register_script(_TAKE)
        self._confirm = client.register_script(_CONFIRM)

    def key(self, name: str) -> str:
        return f"{self.prefix}:limiter:{{{name}}}"

    def take(self, name: str, interval_ms: int, reserved_ms: int | None) -> tuple[int, int]:
        reserved = -1 if reserved_ms is None else reserved_ms
        with _translated("rate limiter"):
            wait, slot = self._take(keys=[self.key(name)], args=[interval_ms, reserved])
        return int(wait), int(slot)

    def confirm(self, name: str, interval_ms: int) -> None:
        with _translated("rate limiter"):
            self._confirm(keys=[self.key(name)], args=[interval_ms])


class MemoryLimiter:
    """The in-process twin (embedded mode): the same decisions on this process's clock."""

    def __init__(self) -> None:
        self._states: dict[str, LimiterState] = {}
        self._lock = threading.Lock()

    def take(self, name: str, interval_ms: int, reserved_ms: int | None) -> tuple[int, int]:
        with self._lock:
            state = self._states.get(name, LimiterState())
            wait, slot, self._states[name] = take_slot(state, _now_ms(), interval_ms, reserved_ms)
        return wait, slot

    def confirm(self, name: str, interval_ms: int) -> None:
        with self._lock:
            state = self._states.get(name, LimiterState())
            self._states[name] = started(state, _now_ms(), interval_ms)


def _now_ms() -> float:
    return time.time() * 1000


class GlobalRateLimit(Hooks):
    """Spaces the starts of the bodies of every task naming one limiter."""

    def __init__(self, limiter: Limiter) -> None:
        self.limiter = limiter

    def before_claim(self, delivery: Delivery) -> float | Wait | None:
        limits = delivery.limits
        if limits is None or limits.rate_name is None:
            return None
        name = limits.rate_name
        try:
            wait_ms, slot = self.limiter.take(name, limits.interval_ms, limits.reserved_ms)
        except GuardError as exc:
            return Wait(UNAVAILABLE_WAIT_S, f"rate limiter {name!r} unavailable: {exc}")
        if wait_ms <= 0:
            return None
        reason = f"rate limit {name!r}: its slot comes in {wait_ms} ms"
        return Wait(wait_ms / 1000, reason, slot_header(name, slot))

    def after_claim(self, delivery: Delivery, claim: Claim) -> None:
        limits = delivery.limits
        if limits is None or limits.rate_name is None:
            return
        try:
            self.limiter.confirm(limits.rate_name, limits.interval_ms)
        except GuardError as exc:  # the check already recorded this start
            logger.warning("job %s: rate limiter start not confirmed: %s", claim.job_id, exc)
