"""The keyed rate limit's hook (issue 27): what it asks the limiter, and when not at all
(the hot path of a task with no ``rate_limits``)."""

from __future__ import annotations

from typing import Any

from celery_tracked.backends.limiter import MemoryLimiter
from celery_tracked.core.errors import GuardError
from celery_tracked.core.hooks import Delivery, Wait
from celery_tracked.core.jobs import Claim
from celery_tracked.core.limits import DeliveryLimits
from celery_tracked.core.rates import HEADER_RATE_TURNS, Turn
from celery_tracked.services.limits import KeyedRateLimit


class Counting(MemoryLimiter):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[Turn, ...]] = []
        self.placed = 0

    def turns(self, turns: tuple[Turn, ...], grant: bool = True) -> Any:
        self.asked.append(turns)
        self.placed += not grant
        return super().turns(turns, grant)


def delivery(*turns: Turn, inline: bool = False, limits: bool = True) -> Delivery:
    found = DeliveryLimits(turns=turns) if limits else None
    return Delivery("j1", "t", "q", "t", found, inline)


CLAIM = Claim("j1", 1, 3)


def test_a_task_without_keyed_limits_asks_nothing() -> None:
    limiter = Counting()
    hook = KeyedRateLimit(limiter, sleep=lambda s: None)
    for plain in (delivery(limits=False), delivery()):  # no limits; a concurrency key only
        assert hook.before_claim(plain) is None
        assert hook.before_body(plain, CLAIM) is None
    assert limiter.asked == []


def test_a_start_costs_one_round_trip_and_a_wait_carries_its_place() -> None:
    limiter = Counting()
    slept: list[float] = []
    hook = KeyedRateLimit(limiter, sleep=slept.append)
    one = Turn("ai:t1", 1, 1000.0)
    assert hook.before_claim(delivery(one)) is None  # nothing known: nothing asked
    assert hook.before_body(delivery(one), CLAIM) is None
    assert len(limiter.asked) == 1  # the grant: one round trip
    waited = hook.before_body(delivery(one), CLAIM)
    assert isinstance(waited, Wait) and 0.9 < waited.seconds <= 1.0
    assert waited.headers is not None and HEADER_RATE_TURNS in waited.headers
    assert "t1" not in str(waited.headers) and "t1" not in waited.reason  # keys unshown
    assert len(limiter.asked) == 2
    # known over its limit: a fresh delivery takes its place before the claim (one round
    # trip, nothing granted), re-published for it
    placed = hook.before_claim(delivery(one))
    assert isinstance(placed, Wait) and placed.seconds > 1.0 and placed.headers is not None
    assert len(limiter.asked) == 3 and limiter.placed == 1
    assert hook.before_claim(delivery(Turn("ai:t2", 1, 1000.0))) is None  # unknown key
    assert len(limiter.asked) == 3
    assert slept == []


def test_a_place_before_the_claim_never_grants() -> None:
    limiter = Counting()
    hook = KeyedRateLimit(limiter, sleep=lambda s: None)
    one = Turn("ai:t1", 2, 1000.0, burst=2)
    assert limiter.turns((one,), grant=False)[0] == 0  # room: nothing recorded
    assert hook.before_body(delivery(one), CLAIM) is None
    assert hook.before_body(delivery(one), CLAIM) is None  # both granted: none was taken
    assert limiter.free_in((one,)) > 900
    assert isinstance(hook.before_claim(delivery(one)), Wait)


def test_an_unreachable_limiter_postpones() -> None:
    class Down(MemoryLimiter):
        def turns(self, turns: tuple[Turn, ...]) -> Any:
            raise GuardError("connection refused")

    waited = KeyedRateLimit(Down()).before_body(delivery(Turn("k", 1, 1000.0)), CLAIM)
    assert isinstance(waited, Wait) and waited.seconds == 1.0
