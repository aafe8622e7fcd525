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

The built-in hook that uses it, :class:`~celery_tracked.services.limits.GlobalRateLimit`,
is a service (``services/limits.py``); the :class:`~celery_tracked.core.guard.Limiter`
Protocol is in the core.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Any

import redis

from ..core.limits import LimiterState, grant_start, release_slot, take_slot
from ..core.rates import RateState, Turn, decide, free_at
from .guard import translated
from .rate_hints import Hints

logger = logging.getLogger("celery_tracked")

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


#: rates.decide over a delivery's turns: KEYS = per turn its hash (line, tat, late, seq),
#: its grants and its plans (sorted sets of times, one member per unit); ARGV = per turn:
#: count, window_ms, span_ms, cost_ms, units, slot (-1: none), seq (its place's first id),
#: then 1 to grant (0: a place only, before the claim: room now is not taken)
#: -> {wait_ms, then (waiting) per turn its slot and seq, then per turn rates.free_at - now}
_DECIDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local n = #KEYS / 3
local grant = tonumber(ARGV[n * 7 + 1]) == 1
local T = {}
local latest = -math.huge
local function cap(zkey, count, units, window)
  local idx = count - units
  local r = redis.call('ZREVRANGE', zkey, idx, idx, 'WITHSCORES')
  if r[2] then return tonumber(r[2]) + window end
  return -math.huge
end
local function add(i, zkey, at)
  local first = redis.call('HINCRBY', T[i].h, 'seq', T[i].units) - T[i].units + 1
  for k = 0, T[i].units - 1 do
    redis.call('ZADD', zkey, string.format('%.3f', at), first + k)
  end
  return first
end
for i = 1, n do
  local b = (i - 1) * 7
  local x = {h = KEYS[i * 3 - 2], g = KEYS[i * 3 - 1], p = KEYS[i * 3]}
  x.count, x.window = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  x.span, x.cost, x.units = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
  x.slot, x.seq = tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])
  if x.slot < 0 then x.slot = nil end
  redis.call('ZREMRANGEBYSCORE', x.g, '-inf', string.format('%.3f', now - x.window))
  redis.call('ZREMRANGEBYSCORE', x.p, '-inf', string.format('%.3f', now - x.window))
  x.line = tonumber(redis.call('HGET', x.h, 'line')) or now
  x.tat = tonumber(redis.call('HGET', x.h, 'tat')) or now
  local at = cap(x.g, x.count, x.units, x.window)
  if not x.slot then
    at = math.max(at, math.max(x.tat, now) + x.cost - x.span)
  end
  x.at = at
  if at > latest then latest = at end
  T[i] = x
end
local function free(out)
  for i = 1, n do
    local y = T[i]
    local tat = tonumber(redis.call('HGET', y.h, 'tat')) or now
    local paced = math.max(tat, now) + y.window / y.count - y.span
    local at = math.max(cap(y.g, y.count, 1, y.window), paced)
    out[#out + 1] = math.max(0, math.floor(at - now))
  end
  return out
end
local function save(x)
  redis.call('HSET', x.h, 'line', string.format('%.3f', x.line))
  local ttl = math.ceil(math.max(x.line, latest, now) - now + x.window + 60000)
  for _, k in ipairs({x.h, x.g, x.p}) do redis.call('PEXPIRE', k, ttl) end
end
if latest <= now and not grant then return free({0}) end
if latest <= now then
  for i = 1, n do
    local x = T[i]
    add(i, x.g, now)
    local due = x.tat
    if now - due > x.window / x.count / 2 then due = now end
    redis.call('HSET', x.h, 'tat', string.format('%.3f', due + x.cost))
    if not x.slot then
      x.line = math.max(x.line, now) + x.cost
      add(i, x.p, now)
    end
    save(x)
  end
  return free({0})
end
local function place(x)
  local base = math.max(x.line, now) + x.cost
  return math.max(base - x.span, cap(x.p, x.count, x.units, x.window))
end
for i = 1, n do
  if not T[i].slot then latest = math.max(latest, place(T[i])) end
end
latest = math.max(latest, now)
local out, wait = {0}, -math.huge
for i = 1, n do
  local x = T[i]
  if x.slot then
    if x.at > now then
      x.at = math.max(x.at, tonumber(redis.call('HGET', x.h, 'late')) or x.at)
      redis.call('HSET', x.h, 'late', string.format('%.3f', x.at + x.cost))
    end
    out[i * 2], out[i * 2 + 1] = x.slot, x.seq
    wait = math.max(wait, x.at - now)
  else
    local base = math.max(x.line, now) + x.cost
    local slot = math.max(place(x), latest)
    x.line = math.max(base, slot + x.cost)
    local first = add(i, x.p, slot)
    save(x)
    out[i * 2], out[i * 2 + 1] = math.ceil(slot), first
    wait = math.max(wait, slot - now)
  end
end
out[1] = math.max(1, math.ceil(wait))
return free(out)
"""


class RedisLimiter:
    """The limiter on a real Redis (the guard's client)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.prefix = prefix
        self._take = client.register_script(_TAKE)
        self._grant = client.register_script(_GRANT)
        self._release = client.register_script(_RELEASE)
        self._decide = client.register_script(_DECIDE)
        self.hints = Hints()

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

    def rate_key(self, key: str, part: str = "line") -> str:
        """One of a keyed rate limit's Redis keys: its ``line`` (a hash), its ``grants``
        and its ``plans`` (sorted sets); all share the hash tag ``{rate}`` so that the
        keys of one delivery's limits are on one Redis Cluster node."""
        return f"{self.prefix}:rate:{{rate}}:{part}:{key}"

    def turns(self, turns: tuple[Turn, ...], grant: bool = True) -> tuple[int, tuple[Turn, ...]]:
        args: list[Any] = []
        keys: list[str] = []
        for turn in turns:
            slot = -1 if turn.slot_ms is None else turn.slot_ms
            args += [turn.count, f"{turn.window_ms:.3f}", f"{turn.span_ms:.3f}"]
            args += [f"{turn.cost_ms:.3f}", turn.units, slot, turn.seq or 0]
            keys += [self.rate_key(turn.key, p) for p in ("line", "grants", "plans")]
        with translated("rate limiter"):
            out = self._decide(keys=keys, args=[*args, 1 if grant else 0])
        n = len(turns)
        self.hints.note(turns, out[-n:])
        wait = int(out[0])
        if wait == 0:
            return 0, turns
        places = zip(turns, out[1 : 2 * n : 2], out[2 : 2 * n + 1 : 2], strict=True)
        return wait, tuple(replace(t, slot_ms=int(s), seq=int(q)) for t, s, q in places)

    def free_in(self, turns: tuple[Turn, ...]) -> float:
        return self.hints.free_in(turns)


class MemoryLimiter:
    """The in-process twin (embedded mode): the same decisions on this process's clock; its
    state starts empty with the process (the first start is granted at once)."""

    def __init__(self) -> None:
        self._states: dict[str, LimiterState] = {}
        self._rates: dict[str, RateState] = {}
        self.hints = Hints()
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

    def turns(self, turns: tuple[Turn, ...], grant: bool = True) -> tuple[int, tuple[Turn, ...]]:
        with self._lock:
            now = _now_ms()
            states = [self._rates.get(t.key, RateState()) for t in turns]
            wait, made, new = decide(states, turns, now, grant)
            for turn, state in zip(turns, new, strict=True):
                self._rates[turn.key] = state
            free = [free_at(s, t, now) - now for s, t in zip(new, turns, strict=True)]
            self.hints.note(turns, free)
        return wait, made

    def free_in(self, turns: tuple[Turn, ...]) -> float:
        return self.hints.free_in(turns)


def _now_ms() -> float:
    return time.time() * 1000
