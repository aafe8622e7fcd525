"""Rate and concurrency limits (issue 8, item 3): the options refused at decoration, the
slot decisions, the in-process limiter and its hook, and the runner's keyed claim against
the store's twin. No service."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from celery import Celery

from celery_tracked import InvalidTaskOption, TrackedTask, tracked_task
from celery_tracked.backends.limiter import MemoryLimiter
from celery_tracked.core.calls import CallShape
from celery_tracked.core.errors import InvalidPayload
from celery_tracked.core.hooks import Delivery, HookChain, Hooks, Wait
from celery_tracked.core.jobs import Claim, JobStatus, utcnow
from celery_tracked.core.limits import (
    HEADER_RATE_SLOT,
    DeliveryLimits,
    LimiterState,
    Limits,
    busy_key_countdown,
    grant_start,
    limits_of,
    recovered,
    reserved_slot,
    slot_header,
    started,
    take_slot,
)
from celery_tracked.core.outcomes import Completed, Postponed
from celery_tracked.core.settings import Settings
from celery_tracked.services.lease import LeaseKeeper
from celery_tracked.services.limits import GlobalRateLimit
from celery_tracked.services.runner import Runner

from .test_runner import MemoryStore, Recorder, World


@pytest.fixture
def world() -> Iterator[World]:
    """test_runner's world: the runner on the store's twin, a recording hook."""
    store, recorder = MemoryStore(), Recorder()
    keeper = LeaseKeeper(store, lease_seconds=60)  # type: ignore[arg-type]
    settings = Settings(redis_url="memory://")
    runner = Runner(store, keeper, HookChain([recorder]), settings)  # type: ignore[arg-type]
    yield World(store, recorder, runner)
    keeper.stop()


BAD = [
    ("rate_limit_global", ("ai", 0)),
    ("rate_limit_global", ("ai", "2s")),
    ("rate_limit_global", ("ai", True)),
    ("rate_limit_global", ("", 100)),
    ("rate_limit_global", 7),
    ("rate_limit_global", ("ai", 100, 3)),
    ("concurrency_key", 12),
    ("concurrency_key", "course:{course.id}"),
    ("concurrency_key", "course:{"),
    ("concurrency_limit", 0),
    ("concurrency_limit", True),
]


def app() -> Celery:
    return Celery("limits", broker="memory://", set_as_current=False)


@pytest.mark.parametrize(("name", "value"), BAD)
def test_a_bad_limit_is_refused_at_decoration(name: str, value: Any) -> None:
    options = {name: value}
    if name == "concurrency_limit":
        options["concurrency_key"] = "k"
    with pytest.raises(InvalidTaskOption) as info:
        tracked_task(app=app(), **options)(lambda x: x)
    assert info.value.setting == name
    with pytest.raises(InvalidTaskOption):
        type("Bad", (TrackedTask,), options)


def test_a_concurrency_limit_needs_a_key() -> None:
    with pytest.raises(InvalidTaskOption, match="needs a concurrency_key"):
        tracked_task(app=app(), concurrency_limit=2)(lambda x: x)


def test_the_declared_limits() -> None:
    assert limits_of({}) == Limits()
    assert limits_of({"rate_limit_global": ("ai", 250)}) == Limits("ai", 250)
    assert limits_of({"rate_limit_global": ["ai", 250]}) == Limits("ai", 250)
    assert limits_of({"rate_limit_global": "course_gen"}) == Limits("course_gen", None)
    keyed = limits_of({"concurrency_key": "course:{course_id}", "concurrency_limit": 1})
    assert (keyed.concurrency_key, keyed.concurrency_limit) == ("course:{course_id}", 1)


def test_a_task_class_keeps_its_limits_and_a_callable_key() -> None:
    def by_tenant(tenant: str, n: int = 0) -> str:
        return f"tenant:{tenant}"

    def body(tenant: str, n: int = 0) -> int:
        return n

    task = tracked_task(
        app=app(), rate_limit_global=("ai", 100), concurrency_key=by_tenant, concurrency_limit=3
    )(body)
    limits = task._tracked_limits
    assert (limits.rate_name, limits.rate_interval_ms, limits.concurrency_limit) == ("ai", 100, 3)
    shape = CallShape(lambda tenant, n=0: n)
    assert limits.key_of(shape, ("acme",), {"n": 2}) == "tenant:acme"


class _Request:
    def __init__(self, headers: dict[str, Any] | None = None, **attributes: Any) -> None:
        self.headers = headers
        self.__dict__.update(attributes)


def test_a_delivery_resolves_its_limits_from_the_settings_and_its_message() -> None:
    shape = CallShape(lambda course_id: None)
    settings = Settings(redis_url="memory://", rate_limit_ms=750, concurrency_limit=4)
    limits = Limits("course_gen", None, "course:{course_id}", None)
    request = _Request({HEADER_RATE_SLOT: "course_gen@1234"})
    found = limits.for_delivery(shape, ("c-1",), {}, request, settings)
    assert found == DeliveryLimits("course_gen", 750, 1234, "course:c-1", 4)
    # Celery also makes a custom header an attribute of the request
    request = _Request(None, **{HEADER_RATE_SLOT: "course_gen@99"})
    found = limits.for_delivery(shape, ("c-1",), {}, request, settings)
    assert found is not None and found.reserved_ms == 99
    assert Limits().for_delivery(shape, ("c-1",), {}, request, settings) is None


def test_a_key_the_arguments_cannot_make_is_refused() -> None:
    shape = CallShape(lambda course_id: None)
    with pytest.raises(InvalidPayload, match="concurrency key"):
        Limits(concurrency_key="course:{other}").key_of(shape, ("c-1",), {})
    with pytest.raises(InvalidPayload, match="1-255"):
        Limits(concurrency_key="{course_id}").key_of(shape, ("x" * 300,), {})


def test_a_reserved_slot_is_read_only_for_its_own_limiter() -> None:
    assert slot_header("ai", 1500) == {HEADER_RATE_SLOT: "ai@1500"}
    assert reserved_slot("ai@1500", "ai") == 1500
    assert reserved_slot("a@b@1500", "a@b") == 1500
    assert reserved_slot("other@1500", "ai") is None
    assert reserved_slot("ai@soon", "ai") is None
    assert reserved_slot(None, "ai") is None
    assert reserved_slot("ai@1500", None) is None


# -- the slot decisions ----------------------------------------------------------------


def test_the_first_delivery_claims_at_once_and_is_granted_its_start_after_the_claim() -> None:
    wait, slot, state = take_slot(LimiterState(), 1000, 200, None)
    # no start recorded: the delivery holds the turn while it claims
    assert (wait, slot, state) == (
        0,
        1000,
        LimiterState(1200, None, hold_ms=1000, hold_until_ms=1200),
    )
    assert grant_start(state, 1004, 200, slot) == (0, LimiterState(1204, 1004))  # claim: 4 ms


def test_an_empty_state_is_taken_as_a_start_granted_now() -> None:
    """A Redis that lost the limiter's state (or its first use: they look alike) waits one
    interval from the moment it is noticed, never less after a start granted before."""
    assert recovered(LimiterState(), 1000, 200) == LimiterState(1200, 1000)
    assert take_slot(recovered(LimiterState(), 1000, 200), 1000, 200, None)[:2] == (200, 1200)
    assert grant_start(recovered(LimiterState(), 1000, 200), 1000, 200, 1000)[0] == 200
    assert recovered(LimiterState(900, None), 1000, 200) == LimiterState(900, None)


def test_deliveries_reserve_slots_an_interval_apart_and_start_at_them() -> None:
    state = LimiterState(1200, 1000)  # a start at 1000
    wait_b, slot_b, state = take_slot(state, 1010, 200, None)
    wait_c, slot_c, state = take_slot(state, 1020, 200, None)
    assert (wait_b, slot_b, wait_c, slot_c) == (190, 1200, 380, 1400)
    assert state == LimiterState(1600, 1000)
    # b comes back at its slot: it may claim, reserving nothing more; its grant records it
    wait, slot, state = take_slot(state, 1200, 200, slot_b)
    assert (wait, slot, state) == (0, 1200, LimiterState(1600, 1000, None, None, 1200, 1400))
    wait, state = grant_start(state, 1201, 200, slot_b)
    assert (wait, state) == (0, LimiterState(1600, 1201))
    # c comes back early (a skewed ETA): it waits again for the rest, keeping its slot
    assert take_slot(state, 1390, 200, slot_c)[:2] == (11, 1400)


def test_a_claim_slower_than_the_interval_is_refused_its_start_and_then_owed_it() -> None:
    """A passed the check at its slot (1000), then its claim waited 1.2 intervals on a row
    lock; meanwhile B, at its slot (2000), claimed and was granted its start (2001). A's
    start is refused (it gives its claim back) until B's interval has passed; then the next
    start is A's: C (slot 3000) does not overtake it."""
    state = LimiterState(4000, None)  # slots 1000 (A), 2000 (B) and 3000 (C) reserved
    assert take_slot(state, 1000, 1000, 1000)[0] == 0  # A claims...
    assert take_slot(state, 2000, 1000, 2000)[0] == 0  # ...B too, while A's claim waits
    wait, state = grant_start(state, 2001, 1000, 2000)
    assert (wait, state) == (0, LimiterState(4000, 2001))
    wait, state = grant_start(state, 2200, 1000, 1000)  # A: refused, and owed the next start
    assert (wait, state) == (801, LimiterState(4000, 2001, 1000, 4001))
    # C, at its slot, waits for A's start and its interval (or for A's turn to lapse)
    assert take_slot(state, 3001, 1000, 3000)[:2] == (1000, 3000)
    assert grant_start(state, 3001, 1000, 3000) == (1000, state)  # even if it claimed
    # A comes back with its slot: it claims and starts; the debt is paid
    assert take_slot(state, 3001, 1000, 1000)[0] == 0
    assert grant_start(state, 3001, 1000, 1000) == (0, LimiterState(4001, 3001))
    # had A not come back, C would start once A's turn lapsed
    assert take_slot(state, 4001, 1000, 3000)[0] == 0


def test_only_the_oldest_refused_slot_is_owed() -> None:
    state = LimiterState(5000, 2001)  # a start at 2001
    _, state = grant_start(state, 2100, 1000, 1500)
    _, state = grant_start(state, 2200, 1000, 1000)  # older: it takes the debt over
    assert (state.owed_ms, state.owed_until_ms) == (1000, 4001)
    assert grant_start(state, 2300, 1000, 1500)[1].owed_ms == 1000  # younger: it waits
    # the owed slot refused again (an older stale one started): its turn moves on
    assert grant_start(LimiterState(5000, 2500, 1000, 4001), 2600, 1000, 1000)[1] == (
        LimiterState(5000, 2500, 1000, 4500)
    )
    assert grant_start(state, 2300, 1000, None)[1].owed_ms == 1000  # no slot: never owed


def test_a_delivery_claiming_its_job_holds_the_turn_for_one_interval() -> None:
    """While A claims (between its check and its grant), B does not pass the check: claims
    follow the limiter too. A claim slower than its turn lets B claim; whichever is granted
    first starts, the other is refused (and owed the next start)."""
    _, _, state = take_slot(LimiterState(1200, None), 1000, 200, 1000)  # A claims
    assert take_slot(state, 1150, 200, 1100)[:2] == (50, 1100)  # B waits for A's turn
    _, granted = grant_start(state, 1010, 200, 1000)  # A starts
    assert granted == LimiterState(1210, 1010)
    assert take_slot(granted, 1150, 200, 1100)[0] == 60  # B: A's interval now
    # A's claim is slower than its turn: B claims at 1250, and is granted first
    wait, _, both = take_slot(state, 1250, 200, 1100)
    assert wait == 0 and (both.hold_ms, both.hold_until_ms) == (1100, 1450)
    _, b_started = grant_start(both, 1260, 200, 1100)
    assert grant_start(b_started, 1300, 200, 1000) == (
        160,
        LimiterState(1460, 1260, owed_ms=1000, owed_until_ms=1660),
    )


def test_a_late_or_stale_delivery_never_starts_closer_than_the_interval() -> None:
    state = LimiterState(1600, 1500)  # a start at 1500
    # a delivery whose slot (1000) passed long ago waits for the latest start's interval
    wait, slot, after = take_slot(state, 1550, 200, 1000)
    assert (wait, slot, after) == (150, 1000, state)
    wait, _, after = take_slot(state, 1700, 200, 1000)
    assert wait == 0 and after == LimiterState(1600, 1500, hold_ms=1000, hold_until_ms=1900)
    assert grant_start(state, 1699, 200, 1000)[0] == 1
    assert grant_start(state, 1700, 200, 1000) == (0, LimiterState(1900, 1700))


def test_a_recorded_start_pushes_the_next_start_and_the_next_slot() -> None:
    assert started(LimiterState(1200, 1000), 1004, 200) == LimiterState(1204, 1004)
    assert started(LimiterState(), 50, 200) == LimiterState(250, 50)
    assert started(LimiterState(900, 800), 700, 200) == LimiterState(1000, 800)  # never back


def test_a_busy_key_looks_again_within_a_second() -> None:
    assert busy_key_countdown(0.0) == 0.25
    assert 0.25 <= busy_key_countdown(0.999) < 0.75


@pytest.mark.parametrize("waiting", [1, 5, 20, 100, 119])
def test_the_deliveries_waiting_on_a_key_look_at_most_4_times_a_second(waiting: int) -> None:
    """A freed slot is handed on (``handoff.py``): the looks only find one no hand-off took."""
    mean = busy_key_countdown(0.5, waiting)  # the jitter's middle
    assert mean == pytest.approx(max(0.5, waiting / 4))
    assert waiting / mean == pytest.approx(min(4.0, waiting / 0.5))  # looks per second
    assert busy_key_countdown(0.0, waiting) == pytest.approx(mean / 2)


def test_a_delivery_waits_at_most_four_minutes_however_long_the_line() -> None:
    assert busy_key_countdown(0.999, 10_000) == 240.0
    assert busy_key_countdown(0.999, 10_000, longest=45.0) == 45.0  # the reaper's 60 s


# -- the in-process limiter and its hook -----------------------------------------------


def delivery(limits: DeliveryLimits | None, inline: bool = False) -> Delivery:
    return Delivery("j-1", "send", "q", "app.send", limits, inline)


CLAIM = Claim("j-1", 1, 3)


def test_the_hook_postpones_to_the_reserved_slot_and_carries_it() -> None:
    hook = GlobalRateLimit(MemoryLimiter())
    first = DeliveryLimits("ai", 60_000)
    assert hook.before_claim(delivery(first)) is None
    assert hook.before_body(delivery(first), CLAIM) is None  # granted: the body starts
    wait = hook.before_claim(delivery(first))
    assert isinstance(wait, Wait) and 59 < wait.seconds <= 60
    assert "rate limit 'ai'" in wait.reason
    assert wait.headers is not None
    slot = reserved_slot(wait.headers[HEADER_RATE_SLOT], "ai")
    assert slot is not None
    # the message delivered again with its slot waits for that slot, reserving no other
    again = hook.before_claim(delivery(DeliveryLimits("ai", 60_000, slot)))
    assert isinstance(again, Wait) and again.headers == wait.headers
    third = hook.before_claim(delivery(first))
    assert isinstance(third, Wait) and third.seconds > 119


def test_a_delivery_that_passed_the_check_holds_the_turn_for_its_claim() -> None:
    hook = GlobalRateLimit(MemoryLimiter())
    fresh, stale = DeliveryLimits("ai", 60_000), DeliveryLimits("ai", 60_000, 5)
    assert hook.before_claim(delivery(fresh)) is None
    held = hook.before_claim(delivery(stale))  # the fresh one is claiming its job
    assert isinstance(held, Wait) and 59 < held.seconds <= 60
    assert held.headers == slot_header("ai", 5)
    assert hook.before_body(delivery(fresh), CLAIM) is None
    after = hook.before_claim(delivery(stale))  # now the fresh start's interval
    assert isinstance(after, Wait) and 59 < after.seconds <= 60


class Scripted:
    """A limiter answering the waits it is given, in order."""

    def __init__(self, takes: list[int], grants: list[int]) -> None:
        self.takes, self.grants = takes, grants

    def take(self, name: str, interval_ms: int, reserved_ms: int | None) -> tuple[int, int]:
        return self.takes.pop(0), 777 if reserved_ms is None else reserved_ms

    def grant(self, name: str, interval_ms: int, slot_ms: int | None) -> int:
        return self.grants.pop(0)


def test_short_waits_before_the_claim_are_slept_in_process_never_after_it() -> None:
    slept: list[float] = []
    limits = DeliveryLimits("ai", 1000)
    hook = GlobalRateLimit(Scripted([30, 0, 40, 40, 40, 40], [20, 2000]), slept.append)
    assert hook.before_claim(delivery(limits)) is None
    assert slept == [0.03]
    # holding the claim, even a short wait gives it back (it would hold the job's key slot
    # and count in its started_at while no body runs); the delivery keeps its slot
    refused = hook.before_body(delivery(limits), CLAIM)
    assert isinstance(refused, Wait) and refused.seconds == 0.02
    assert refused.headers == slot_header("ai", 777)
    # at most three short waits in a row, then the delivery is postponed, keeping its slot
    wait = hook.before_claim(delivery(limits))
    assert isinstance(wait, Wait) and wait.seconds == 0.04 and len(slept) == 4
    assert wait.headers == slot_header("ai", 777)
    refused = hook.before_body(delivery(limits), CLAIM)  # not this thread's taken slot
    assert isinstance(refused, Wait) and refused.seconds == 2.0 and refused.headers is None


def test_an_inline_run_waits_in_process() -> None:
    """Eager mode: a re-published delivery would run again at once (recursion), so every
    wait is slept; the start stays one decision after the sleep."""
    slept: list[float] = []
    hook = GlobalRateLimit(Scripted([2500, 0], [700, 0]), slept.append)
    limits = DeliveryLimits("ai", 3000)
    assert hook.before_claim(delivery(limits, inline=True)) is None
    assert hook.before_body(delivery(limits, inline=True), CLAIM) is None
    assert slept == [2.5, 0.7]


def test_limiters_are_independent_and_unlimited_tasks_pass() -> None:
    hook = GlobalRateLimit(MemoryLimiter())
    assert hook.before_claim(delivery(DeliveryLimits("a", 60_000))) is None
    assert hook.before_claim(delivery(DeliveryLimits("b", 60_000))) is None
    assert hook.before_claim(delivery(None)) is None
    assert hook.before_claim(delivery(DeliveryLimits(None, 0, None, "k", 1))) is None
    assert hook.before_body(delivery(None), CLAIM) is None


def test_an_unreachable_limiter_postpones() -> None:
    from celery_tracked.backends.guard import GuardError

    class Down(MemoryLimiter):
        def take(self, name: str, interval_ms: int, reserved_ms: int | None) -> tuple[int, int]:
            raise GuardError("Redis rate limiter failed: connection refused")

        def grant(self, name: str, interval_ms: int, slot_ms: int | None) -> int:
            raise GuardError("Redis rate limiter failed: connection refused")

    hook = GlobalRateLimit(Down())
    for asked in (
        hook.before_claim(delivery(DeliveryLimits("ai", 100))),
        hook.before_body(delivery(DeliveryLimits("ai", 100)), CLAIM),
    ):
        assert isinstance(asked, Wait) and asked.seconds == 1.0 and "unavailable" in asked.reason


def test_a_hook_chain_passes_a_wait_through_and_tells_every_hook_of_a_claim() -> None:
    class Seen(GlobalRateLimit):
        claims: ClassVar[list[str]] = []

        def after_claim(self, delivery: Delivery, claim: Claim) -> None:
            self.claims.append(claim.job_id)

    chain = HookChain([Seen(MemoryLimiter()), GlobalRateLimit(MemoryLimiter())])
    limited = delivery(DeliveryLimits("ai", 60_000))
    assert chain.before_claim(limited) is None
    chain.after_claim(limited, CLAIM)
    assert chain.before_body(limited, CLAIM) is None
    assert Seen.claims == ["j-1"]
    assert isinstance(chain.before_claim(limited), Wait)
    assert isinstance(chain.before_body(limited, CLAIM), Wait)


# -- the runner ------------------------------------------------------------------------


def test_the_runner_postpones_a_limited_delivery_with_its_slot_and_no_attempt(
    world: World,
) -> None:
    world.runner.hooks.add(GlobalRateLimit(MemoryLimiter()))  # type: ignore[attr-defined]
    world.store.add("j-1")
    world.store.add("j-2")
    limits = DeliveryLimits("ai", 60_000)
    assert isinstance(world.run(job_id="j-1", limits=limits), Completed)
    verdict = world.run(job_id="j-2", limits=limits)
    assert isinstance(verdict, Postponed) and 59 < verdict.countdown <= 60
    assert verdict.headers is not None and HEADER_RATE_SLOT in verdict.headers
    job = world.job("j-2")
    assert (job.status, job.attempts_made, world.bodies) == (JobStatus.PENDING, 0, 1)


class RefuseStart(Hooks):
    """Refuses every start after the claim (as the limiter does when another was granted)."""

    def before_body(self, delivery: Delivery, claim: Claim) -> Wait:
        return Wait(2.5, "another body started", {"h": "1"})


def refusing(world: World) -> World:
    world.runner.hooks.add(RefuseStart())  # type: ignore[attr-defined]
    return world


def test_a_start_refused_after_the_claim_gives_the_claim_back_with_no_attempt(
    world: World,
) -> None:
    refusing(world).store.add("j-1", max_attempts=3)
    verdict = world.run()
    assert isinstance(verdict, Postponed) and verdict.countdown == 2.5
    assert verdict.headers == {"h": "1"} and "claim given back" in verdict.reason
    job = world.job()
    assert (job.status, job.attempts_made, job.started_at, job.worker) == (
        JobStatus.PENDING,
        0,
        None,
        None,
    )
    assert (job.locked_by, job.locked_until, world.bodies) == (None, None, 0)
    assert world.recorder.events == ["processing", "busy"]
    assert not world.runner.leases.is_active("j-1")


def test_a_retrying_job_given_back_stays_retrying_with_its_attempts(world: World) -> None:
    first_start = utcnow() - timedelta(minutes=1)
    refusing(world).store.add(
        "j-1", status=JobStatus.RETRYING, attempts_made=1, started_at=first_start, worker="w0"
    )
    assert isinstance(world.run(), Postponed)
    job = world.job()
    assert (job.status, job.attempts_made, job.started_at) == (
        JobStatus.RETRYING,
        1,
        first_start,
    )
    assert job.locked_until is None and world.bodies == 0  # due at once


def test_a_takeover_given_back_leaves_the_lapsed_lease_lapsed(world: World) -> None:
    hold(world, "j-1", "k", -60)  # attempt 1 lost: its lease lapsed a minute ago
    refusing(world)
    assert isinstance(world.run(), Postponed)
    job = world.job()
    assert (job.status, job.attempts_made, job.locked_until) == (JobStatus.PROCESSING, 1, None)
    assert "take_over" in world.store.calls and world.bodies == 0


def test_a_give_back_that_fails_still_runs_no_body(world: World) -> None:
    refusing(world).store.add("j-1")
    world.store.broken.add("give_back")
    verdict = world.run()
    assert isinstance(verdict, Postponed) and "claim not given back" in verdict.reason
    assert world.job().status is JobStatus.PROCESSING and world.bodies == 0


def hold(world: World, job_id: str, key: str, seconds: float) -> None:
    world.store.add(
        job_id,
        status=JobStatus.PROCESSING,
        attempts_made=1,
        concurrency_key=key,
        locked_by="other",
        locked_until=utcnow() + timedelta(seconds=seconds),
    )


def test_a_keyed_job_waits_while_its_key_is_full_without_using_an_attempt(
    world: World,
) -> None:
    hold(world, "holder", "course:c-1", 60)
    world.store.add("j-1", concurrency_key="course:c-1")
    verdict = world.run(limits=DeliveryLimits(key="course:c-1", limit=1))
    assert isinstance(verdict, Postponed) and 0.25 <= verdict.countdown < 0.75
    assert "concurrency key 'course:c-1' has no free slot (limit 1)" in verdict.reason
    assert "claim" not in world.store.calls  # the hint read saw it full
    assert world.job().attempts_made == 0 and world.bodies == 0
    # a limit of 2, or another key, has room
    assert isinstance(world.run(limits=DeliveryLimits(key="course:c-1", limit=2)), Completed)
    world.store.add("j-2", concurrency_key="course:c-2")
    assert isinstance(world.run(job_id="j-2", limits=DeliveryLimits(key="course:c-2")), Completed)


def test_a_slot_whose_lease_lapsed_is_free(world: World) -> None:
    hold(world, "holder", "course:c-1", -1)  # its worker died: the lease lapsed
    world.store.add("j-1", concurrency_key="course:c-1")
    assert isinstance(world.run(limits=DeliveryLimits(key="course:c-1", limit=1)), Completed)


def test_the_longer_the_line_behind_a_full_key_the_later_a_delivery_looks(world: World) -> None:
    hold(world, "holder", "k", 60)
    world.store.add("j-1", concurrency_key="k")
    alone = world.run(limits=DeliveryLimits(key="k", limit=1))
    for n in range(2, 41):
        world.store.add(f"j-{n}", concurrency_key="k")
    crowded = world.run(limits=DeliveryLimits(key="k", limit=1))
    assert isinstance(alone, Postponed) and alone.countdown < 0.75
    assert isinstance(crowded, Postponed) and 5 <= crowded.countdown < 15  # 40 wait


def test_a_claim_that_finds_the_key_full_waits_for_the_key(world: World) -> None:
    world.store.add("j-1", concurrency_key="k")
    world.store.key_busy = lambda *a: False  # type: ignore[method-assign]  # the hint missed it
    world.store.claim = lambda *a, **k: None  # type: ignore[method-assign]  # the claim did not
    verdict = world.run(limits=DeliveryLimits(key="k", limit=1))
    assert isinstance(verdict, Postponed) and "concurrency key 'k'" in verdict.reason
