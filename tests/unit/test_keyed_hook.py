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

    def turns(self, turns: tuple[Turn, ...]) -> Any:
        self.asked.append(turns)
        return super().turns(turns)


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
    assert hook.before_claim(delivery(one)) is None  # still nothing before the claim
    assert len(limiter.asked) == 2
    assert slept == []


def test_an_unreachable_limiter_postpones() -> None:
    class Down(MemoryLimiter):
        def turns(self, turns: tuple[Turn, ...]) -> Any:
            raise GuardError("connection refused")

    waited = KeyedRateLimit(Down()).before_body(delivery(Turn("k", 1, 1000.0)), CLAIM)
    assert isinstance(waited, Wait) and waited.seconds == 1.0
