"""Global rate limits, the feature: the built-in hook spacing the starts of every task that
names one limiter (``@tracked_task(rate_limit_global=(name, ms))``).

The hook, :class:`GlobalRateLimit`. ``before_claim``: a delivery whose slot has
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

The limiter it asks is a :class:`~celery_tracked.core.guard.Limiter`: Redis
(``backends/limiter.py``, one Lua script per decision) or the in-process twin; the pure
decisions are in ``core/limits.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..core.errors import GuardError
from ..core.guard import Limiter
from ..core.hooks import Delivery, Hooks, Wait
from ..core.jobs import Claim
from ..core.limits import slot_header
from ..core.rates import turns_header

logger = logging.getLogger("celery_tracked")

#: How long a delivery waits when the limiter cannot be reached.
UNAVAILABLE_WAIT_S = 1.0
#: A wait this short, before the claim, is slept in-process and asked again.
SHORT_WAIT_S = 0.05
#: A keyed limit's refusal this short, after the claim, is slept in-process.
KEYED_SHORT_WAIT_S = 0.02


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


class KeyedRateLimit(Hooks):
    """Keyed rate limits (``rate_limits=``, ``core/rates.py``): the start is granted after
    the claim, immediately before the body, in one Redis round trip over every limit of
    the delivery (``before_body``). Before the claim, a fresh delivery that this process
    already knows is over its limit takes its place in line (``before_claim``: one round
    trip, no claim written or given back); nothing is asked otherwise. A refused delivery
    gives its claim back and is re-published for its place in line, carried in its
    message (``tracked_rate_turns``): no attempt used, one re-publish per wait (a delivery
    that came back late and finds its key's window full waits for room, keeping its
    place). A refusal shorter than :data:`SHORT_WAIT_S` is slept in-process, holding the
    claim, and asked again, at most :attr:`SHORT_WAITS` times. A place whose delivery
    never runs (its job cancelled or ended) is not given back: one start of its key is
    lost. If Redis is unreachable the delivery is postponed (fails closed)."""

    SHORT_WAITS = 2

    def __init__(self, limiter: Limiter, sleep: Callable[[float], None] = time.sleep) -> None:
        self.limiter = limiter
        self._sleep = sleep

    def before_claim(self, delivery: Delivery) -> float | Wait | None:
        """A fresh delivery that this process knows is over its limit (``free_in``, what
        its last answers said: no round trip) takes its place in line before the claim:
        one round trip, no claim to give back, re-published for its place; room known to
        come within :data:`SHORT_WAIT_S` is slept for (nothing is held yet)."""
        turns = delivery.limits.turns if delivery.limits is not None else ()
        if not turns or delivery.inline or any(t.slot_ms is not None for t in turns):
            return None
        free_ms = self.limiter.free_in(turns)
        if free_ms <= 0:
            return None  # room now, or nothing known: the claim, then the grant
        if free_ms <= SHORT_WAIT_S * 1000:
            self._sleep(free_ms / 1000)  # nothing held yet: slept, then claimed
            return None
        try:
            wait_ms, turns = self.limiter.turns(turns, grant=False)
        except GuardError as exc:
            return Wait(UNAVAILABLE_WAIT_S, f"rate limiter unavailable: {exc}")
        if wait_ms <= 0:
            return None  # room after all (its state was lost): the claim, then the grant
        return Wait(wait_ms / 1000, _why(wait_ms), turns_header(turns))

    def before_body(self, delivery: Delivery, claim: Claim) -> float | Wait | None:
        turns = delivery.limits.turns if delivery.limits is not None else ()
        if not turns:
            return None
        slept = 0
        while True:
            try:
                wait_ms, turns = self.limiter.turns(turns)
            except GuardError as exc:
                return Wait(UNAVAILABLE_WAIT_S, f"rate limiter unavailable: {exc}")
            if wait_ms <= 0:
                return None
            short = wait_ms <= KEYED_SHORT_WAIT_S * 1000 and slept < self.SHORT_WAITS
            if delivery.inline or short:
                slept += 1
                self._sleep(wait_ms / 1000)
                continue
            return Wait(wait_ms / 1000, _why(wait_ms), turns_header(turns))


def _why(wait_ms: int) -> str:
    return f"rate limits: its turn comes in {wait_ms} ms"  # keys unshown: arguments
