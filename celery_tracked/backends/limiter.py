"""The global rate limiter: one Redis hash per limiter, one Lua script per operation.

Two decisions, each :mod:`~celery_tracked.limits`'s pure function run atomically in Redis on
the limiter's one key (``<prefix>:limiter:{<name>}``, hash-tagged: Redis Cluster safe), with
Redis ``TIME`` (to the microsecond) as the one clock of every worker:

- ``take`` (before the claim, :func:`~celery_tracked.limits.take_slot`): reserve a slot, or
  say how long until it comes. Nothing is recorded as started; a delivery that may go
  holds the turn while it claims (one interval at most), so claims follow the limiter too.
- ``grant`` (after the claim, immediately before the body,
  :func:`~celery_tracked.limits.grant_start`): the start itself, granted only if no other
  was granted within the interval. The grant and the body's start are one decision, so a
  claim slower than the interval never lets two bodies start closer than it.

A limiter whose state is gone (first use, a flushed or restarted Redis: the two look alike)
takes it as a start granted at that moment (:func:`~celery_tracked.limits.recovered`).
``MemoryLimiter`` is the in-process twin for the embedded mode (``tracked_redis_url =
"memory://"``), whose state lives and dies with its process.

:class:`GlobalRateLimit` is the built-in hook. ``before_claim``: a delivery whose slot has
not come is postponed to it, its reserved slot carried in the re-published message, so it
never reserves twice; no attempt is used and no pool process waits (Celery holds a message
with an ETA in the worker's memory). ``before_body``: a delivery refused the start gives its
claim back (the runner's move, no attempt used) and is re-published for the start's time,
keeping its slot; the next start is owed to the oldest such slot (for one interval after it
may come back), so the deliveries of later slots do not overtake it. Before the claim, a
wait of at most :data:`SHORT_WAIT_S` is slept in-process instead (no round trip through the
broker; nothing is held yet); after the claim nothing waits holding it (its concurrency-key
slot, and its ``started_at``, would then count time no body ran). An inline run (eager
mode, whose re-publish would run again at once) sleeps every wait, before and after its
claim. A slot reserved by a delivery that never runs (its job cancelled, a duplicate) only
wastes one interval. If Redis is unreachable the delivery is postponed (a rate limit fails
closed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

import redis

from ..core.errors import GuardError
from ..core.hooks import Delivery, Hooks, Wait
from ..core.jobs import Claim
from ..core.limits import LimiterState, grant_start, release_slot, slot_header, take_slot
from .guard import translated

logger = logging.getLogger("celery_tracked")

#: How long a delivery waits when the limiter cannot be reached.
UNAVAILABLE_WAIT_S = 1.0
#: A wait this short, before the claim, is slept in-process and asked again.
SHORT_WAIT_S = 0.05
#: A limiter's key outlives its last reserved slot by this much (ms); a key that expired is
#: an empty state, which waits one interval.
_KEEP_MS = 86_400_000

#: limits.recovered, then the state (an owed slot and a held turn only while they last);
#: ARGV[1] = interval_ms
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = tonumber(ARGV[1])
local h = redis.call('HMGET', KEYS[1], 'next', 'last', 'owed', 'owed_until', 'hold', 'hold_until')
local nxt, last = tonumber(h[1]), tonumber(h[2])
local owed, owed_until = tonumber(h[3]), tonumber(h[4])
local hold, hold_until = tonumber(h[5]), tonumber(h[6])
if not nxt and not last then
  last = now
  nxt = now + interval
end
if not nxt then nxt = now end
if not (owed and owed_until and now < owed_until) then
  owed = nil
  owed_until = nil
end
if not (hold and hold_until and now < hold_until) then
  hold = nil
  hold_until = nil
end
"""


def _save_pair(name: str) -> str:
    """Lua: store ``name`` and ``name_until`` while ``name`` is set, else drop both."""
    return f"""if {name} then
  redis.call('HSET', KEYS[1], '{name}', string.format('%.3f', {name}))
  redis.call('HSET', KEYS[1], '{name}_until', string.format('%.3f', {name}_until))
else
  redis.call('HDEL', KEYS[1], '{name}', '{name}_until')
end
"""


#: (to the microsecond: Redis before 7 writes a Lua number with 14 digits, 0.1 ms)
_SAVE = (
    """
redis.call('HSET', KEYS[1], 'next', string.format('%.3f', nxt))
if last then redis.call('HSET', KEYS[1], 'last', string.format('%.3f', last)) end
"""
    + _save_pair("owed")
    + _save_pair("hold")
    + f"""redis.call('PEXPIRE', KEYS[1], math.ceil(math.max(nxt - now, 0) + interval + {_KEEP_MS}))
"""
)
#: limits.take_slot: ARGV = interval_ms, reserved slot (-1: none) -> {wait_ms, slot}
_TAKE = (
    _NOW
    + """
local reserved = tonumber(ARGV[2])
if reserved < 0 then
  reserved = math.max(now, nxt)
  nxt = reserved + interval
end
local at = reserved
local slot = math.ceil(reserved)
if last and last + interval > at then at = last + interval end
if owed and owed < reserved and owed_until > at then at = owed_until end
if hold and hold ~= slot and hold_until > at then at = hold_until end
if at <= now then
  hold = slot
  hold_until = now + interval
end
"""
    + _SAVE
    + """
if at > now then return {math.ceil(at - now), slot} end
return {0, slot}
"""
)
#: limits.grant_start: ARGV = interval_ms, the delivery's slot (-1: none) -> wait_ms (0:
#: granted, recorded)
_GRANT = (
    _NOW
    + """
local slot = tonumber(ARGV[2])
if slot < 0 then slot = math.huge end
if hold and hold == slot then
  hold = nil
  hold_until = nil
end
if owed and owed < slot then
"""
    + _SAVE
    + """
  return math.ceil(owed_until - now)
end
if last and last + interval > now then
  if slot ~= math.huge and (not owed or slot <= owed) then
    owed = slot
    owed_until = last + 2 * interval
  end
"""
    + _SAVE
    + """
  return math.ceil(last + interval - now)
end
last = now
nxt = math.max(nxt, last + interval)
if not (owed and owed > slot) then
  owed = nil
  owed_until = nil
end
"""
    + _SAVE
    + "return 0\n"
)


#: limits.release_slot: ARGV = interval_ms, the slot -> 1
_RELEASE = (
    _NOW
    + """
local slot = tonumber(ARGV[2])
if hold and hold == slot then
  hold = nil
  hold_until = nil
end
if owed and owed == slot then
  owed = nil
  owed_until = nil
end
"""
    + _SAVE
    + "return 1\n"
)


class Limiter(Protocol):
    def take(self, name: str, interval_ms: int, reserved_ms: int | None) -> tuple[int, int]:
        """``(wait_ms, slot_ms)`` before the claim: 0 when the delivery may claim now."""

    def grant(self, name: str, interval_ms: int, slot_ms: int | None) -> int:
        """After the claim, just before the body, for the delivery of slot ``slot_ms``: 0
        when the start is granted (recorded), else the milliseconds until one may be."""

    def release(self, name: str, interval_ms: int, slot_ms: int) -> None:
        """The delivery of slot ``slot_ms`` runs nothing: its turn and what it is owed go."""


class RedisLimiter:
    """The limiter on a real Redis (the guard's client)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.prefix = prefix
        self._take = client.register_script(_TAKE)
        self._grant = client.register_script(_GRANT)
        self._release = client.register_script(_RELEASE)

    def key(self, name: str) -> str:
        return f"{self.prefix}:limiter:{{{name}}}"

    def take(self, name: str, interval_ms: int, reserved_ms: int | None) -> tuple[int, int]:
        reserved = -1 if reserved_ms is None else reserved_ms
        with translated("rate limiter"):
            wait, slot = self._take(keys=[self.key(name)], args=[interval_ms, reserved])
        return int(wait), int(slot)

    def grant(self, name: str, interval_ms: int, slot_ms: int | None) -> int:
        slot = -1 if slot_ms is None else slot_ms
        with translated("rate limiter"):
            return int(self._grant(keys=[self.key(name)], args=[interval_ms, slot]))

    def release(self, name: str, interval_ms: int, slot_ms: int) -> None:
        with translated("rate limiter"):
            self._release(keys=[self.key(name)], args=[interval_ms, slot_ms])


class MemoryLimiter:
    """The in-process twin (embedded mode): the same decisions on this process's clock; its
    state starts empty with the process (the first start is granted at once)."""

    def __init__(self) -> None:
        self._states: dict[str, LimiterState] = {}
        self._lock = threading.Lock()

    def take(self, name: str, interval_ms: int, reserved_ms: int | None) -> tuple[int, int]:
        with self._lock:
            state = self._states.get(name, LimiterState())
            wait, slot, self._states[name] = take_slot(state, _now_ms(), interval_ms, reserved_ms)
        return wait, slot

    def grant(self, name: str, interval_ms: int, slot_ms: int | None) -> int:
        with self._lock:
            state = self._states.get(name, LimiterState())
            wait, self._states[name] = grant_start(state, _now_ms(), interval_ms, slot_ms)
        return wait

    def release(self, name: str, interval_ms: int, slot_ms: int) -> None:
        with self._lock:
            if name in self._states:
                self._states[name] = release_slot(self._states[name], slot_ms)


def _now_ms() -> float:
    return time.time() * 1000


class GlobalRateLimit(Hooks):
    """Spaces the starts of the bodies of every task naming one limiter."""

    #: Short waits slept in a row before the delivery is postponed instead.
    SHORT_WAITS = 3

    def __init__(self, limiter: Limiter, sleep: Callable[[float], None] = time.sleep) -> None:
        self.limiter = limiter
        self._sleep = sleep
        # the slot this thread's delivery took before its claim, for ``before_body``
        self._taken = threading.local()

    def before_claim(self, delivery: Delivery) -> float | Wait | None:
        limits = delivery.limits
        if limits is None or limits.rate_name is None:
            return None
        name, interval = limits.rate_name, limits.interval_ms
        slot = limits.reserved_ms
        self._taken.job = None

        def take() -> int:
            nonlocal slot
            wait, slot = self.limiter.take(name, interval, slot)
            return wait

        waited = self._ask(take, delivery, f"rate limit {name!r}: its slot comes in", short=True)
        if waited is None:
            self._taken.job, self._taken.slot = delivery.job_id, slot
            return None
        return _with_slot(waited, name, slot)

    def before_body(self, delivery: Delivery, claim: Claim) -> float | Wait | None:
        limits = delivery.limits
        if limits is None or limits.rate_name is None:
            return None
        name, interval = limits.rate_name, limits.interval_ms
        mine = getattr(self._taken, "job", None) == delivery.job_id
        slot: int | None = self._taken.slot if mine else limits.reserved_ms
        waited = self._ask(
            lambda: self.limiter.grant(name, interval, slot),
            delivery,
            f"rate limit {name!r}: another body started; its start comes in",
            short=False,  # holding the claim: give it back rather than wait
        )
        if waited is None:
            return None
        return waited if slot is None else _with_slot(waited, name, slot)

    def after_skip(self, delivery: Delivery) -> None:
        """A delivery that took its turn runs nothing (a rescue replaced its message, its job
        ended): its turn, and a start owed to its slot, go to the next at once."""
        limits = delivery.limits
        if limits is None or limits.rate_name is None:
            return
        mine = getattr(self._taken, "job", None) == delivery.job_id
        slot: int | None = self._taken.slot if mine else limits.reserved_ms
        if slot is None:
            return
        try:
            self.limiter.release(limits.rate_name, limits.interval_ms, slot)
        except GuardError as exc:  # its turn lapses by itself (one interval)
            logger.warning("rate limiter %r: slot not given back: %s", limits.rate_name, exc)

    def _ask(
        self, ask: Callable[[], int], delivery: Delivery, why: str, short: bool
    ) -> Wait | None:
        """None once ``ask`` says 0 (``short`` waits, and an inline run's waits, are slept
        and asked again), else the wait; a limiter that cannot be reached is a wait too."""
        slept = 0
        while True:
            try:
                wait_ms = ask()
            except GuardError as exc:
                name = delivery.limits.rate_name if delivery.limits else None
                return Wait(UNAVAILABLE_WAIT_S, f"rate limiter {name!r} unavailable: {exc}")
            if wait_ms <= 0:
                return None
            brief = short and wait_ms <= SHORT_WAIT_S * 1000 and slept < self.SHORT_WAITS
            if delivery.inline or brief:
                slept += 1
                self._sleep(wait_ms / 1000)
                continue
            return Wait(wait_ms / 1000, f"{why} {wait_ms} ms")


def _with_slot(wait: Wait, name: str, slot: int | None) -> Wait:
    """``wait`` telling the next delivery which slot this one reserved."""
    if slot is None or wait.headers is not None:
        return wait
    return Wait(wait.seconds, wait.reason, slot_header(name, slot))
