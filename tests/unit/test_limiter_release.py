"""A delivery of the global rate limiter that runs nothing gives back what it reserved
(issue 22, item 0): a message a rescue replaced, or whose job ended, is skipped at its
claim; its turn and any start owed to its slot go to the next delivery at once, instead of
stalling the limiter for one interval or two."""

from __future__ import annotations

from celery_tracked.backends.limiter import MemoryLimiter
from celery_tracked.core.hooks import Delivery, Wait
from celery_tracked.core.limits import (
    DeliveryLimits,
    LimiterState,
    grant_start,
    release_slot,
    take_slot,
)
from celery_tracked.core.outcomes import Postponed, Skipped
from celery_tracked.services.limits import GlobalRateLimit

from .test_runner import World, world  # noqa: F401 (a fixture)


def test_a_released_slot_gives_back_its_turn_and_what_it_was_owed() -> None:
    _, _, held = take_slot(LimiterState(1200, None), 1000, 200, 1000)  # A claims
    assert take_slot(held, 1050, 200, 1100)[0] > 0  # B waits for A's turn
    freed = release_slot(held, 1000)  # A's message was replaced: it runs nothing
    assert (freed.hold_ms, freed.hold_until_ms) == (None, None)
    assert take_slot(freed, 1050, 200, 1100)[0] == 50  # B: only its own slot's time now
    owed = LimiterState(4000, 2001, owed_ms=1000, owed_until_ms=4001)
    assert grant_start(owed, 3001, 1000, 3000)[0] == 1000  # C waits for the owed A...
    paid = release_slot(owed, 1000)  # ...which never comes back
    assert grant_start(paid, 3001, 1000, 3000) == (0, LimiterState(4001, 3001))
    other = release_slot(owed, 999)  # another slot's release changes nothing
    assert other == owed


def delivery(limits: DeliveryLimits, job_id: str = "j-1") -> Delivery:
    return Delivery(job_id, "send", "q", "app.send", limits)


def test_the_hook_gives_back_the_turn_of_a_skipped_delivery() -> None:
    limiter = MemoryLimiter()
    hook, other = GlobalRateLimit(limiter), GlobalRateLimit(limiter)  # two workers
    fresh, stale = DeliveryLimits("ai", 60_000), DeliveryLimits("ai", 60_000, 5)
    assert hook.before_claim(delivery(fresh)) is None  # its turn: it claims...
    held = other.before_claim(delivery(stale, "j-2"))
    assert isinstance(held, Wait) and 59 < held.seconds <= 60  # (its turn, for an interval)
    hook.after_skip(delivery(fresh))  # ...finds its message replaced, and gives it back
    assert other.before_claim(delivery(stale, "j-2")) is None  # the next goes at once
    hook.after_skip(delivery(DeliveryLimits(None, 0)))  # no limiter: nothing to give back


def test_the_runner_tells_the_hooks_of_a_delivery_skipped_at_its_claim(
    world: World,  # noqa: F811
) -> None:
    world.store.add(revision=1)  # a rescue replaced the message this delivery carries
    skipped: list[str] = []
    world.recorder.after_skip = lambda d: skipped.append(d.job_id)  # type: ignore[method-assign]
    verdict = world.run()
    assert isinstance(verdict, Skipped) and "newer message" in verdict.reason
    assert skipped == ["j-1"]
    world.store.add("j-2")
    world.recorder.postpone = 1.0
    assert isinstance(world.run(job_id="j-2"), Postponed) and skipped == ["j-1"]
