"""Keyed rate limits (issue 27, item 1): the option, and the GCRA decisions of
``core/rates.py`` with the in-process limiter's clock replaced by a simulated one."""

from __future__ import annotations

import heapq
import random
from dataclasses import replace

import pytest

from celery_tracked.core.errors import InvalidPayload, InvalidTaskOption
from celery_tracked.core.rates import (
    HEADER_RATE_TURNS,
    START_MARGIN_MS,
    RateLimit,
    RateState,
    Turn,
    decide,
    digest,
    free_at,
    parse_rate,
    rates_of,
    turns_header,
    turns_of,
)


def test_rates_spell_n_per_window() -> None:
    assert parse_rate("20/s") == (20, 1)
    assert parse_rate("100/m") == (100, 60)
    assert parse_rate("5/10s") == (5, 10)
    assert parse_rate("1000/h") == (1000, 3600)
    assert RateLimit("k", "20/s").interval_ms == 50
    for bad in ("20", "0/s", "20/week", "x/s", 20, "5/0s"):
        with pytest.raises(InvalidTaskOption, match="rate_limits"):
            parse_rate(bad)


def test_the_option_takes_one_limit_or_a_list() -> None:
    (one,) = rates_of(("ai:{tenant_id}", "20/s"))
    assert one == RateLimit("ai:{tenant_id}", "20/s", burst=20)  # the default burst: N
    two = rates_of([("ai:{tenant_id}", "100/m"), RateLimit("ai", "50/s", burst=5, units=2)])
    assert [r.rate for r in two] == ["100/m", "50/s"]
    assert rates_of(None) == ()
    for bad in (
        [],
        "ai",
        ("ai:{x.y}", "1/s"),
        [("ai", "1/s", 3)],
        RateLimit("a", "1/s", burst=0),
        RateLimit("a", "1/s", units=2),  # more than the burst: never conforms
        RateLimit("a", "1/s", units=1.5),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidTaskOption, match="rate_limits"):
            rates_of(bad)


def test_a_call_makes_its_turns_and_its_units() -> None:
    limits = rates_of([("ai:{tenant}", "10/s"), RateLimit("tok", "100/s", burst=50, units="n")])
    turns = turns_of(limits, {"tenant": "t1", "n": 7}, (), {})
    assert [(t.key, t.count, t.window_ms, t.units, t.slot_ms) for t in turns] == [
        ("ai:t1", 10, 1000.0 + START_MARGIN_MS, 1, None),  # the body's latency
        ("tok", 100, 1000.0 + START_MARGIN_MS, 7, None),
    ]
    header = turns_header([Turn("ai:t1", 10, 1000.0, slot_ms=123, seq=7)])
    assert header == {HEADER_RATE_TURNS: {digest("ai:t1"): [123, 7]}}
    assert "t1" not in str(header)  # the key may hold a secret argument
    again = turns_of(limits, {"tenant": "t1", "n": 7}, (), {}, header[HEADER_RATE_TURNS])
    assert (again[0].slot_ms, again[0].seq) == (123, 7) and again[1].slot_ms is None
    with pytest.raises(InvalidPayload, match="units"):
        turns_of(limits, {"tenant": "t1", "n": 51}, (), {})
    with pytest.raises(InvalidPayload):
        turns_of(limits, {"n": 1}, (), {})  # no tenant to make the key of


def ask(state: RateState, turn: Turn, now: float) -> tuple[int, Turn, RateState]:
    wait, (made,), (new,) = decide([state], [turn], now)
    return wait, made, new


def simulate(
    per_s: int, burst: int, deliveries: int, seed: int, late_ms: float = 80, claim_ms: float = 30
) -> tuple[list[float], int]:
    """Deliveries of one key arriving at random, a re-published one coming back late by up
    to ``late_ms``, its claim taking up to ``claim_ms`` before it asks; as
    ``KeyedRateLimit``, a refusal of at most 50 ms is slept (overshooting up to 2 ms) and
    asked again, up to 3 times. Asks are decided in time order (Redis ``TIME``). The starts
    granted and the re-publishes."""
    rng = random.Random(seed)
    fresh = Turn("k", per_s, 1000.0, burst)
    state = RateState()
    starts: list[float] = []
    # (when it asks, tie-breaker, its turn, short waits slept so far)
    asks = [
        (rng.uniform(0, 200) + rng.uniform(0, claim_ms), n, fresh, 0) for n in range(deliveries)
    ]
    heapq.heapify(asks)
    republished, seq = 0, deliveries
    while asks:
        now, _, turn, slept = heapq.heappop(asks)
        wait, turn, state = ask(state, turn, now)
        seq += 1
        if wait == 0:
            starts.append(now)
        elif wait <= 50 and slept < 3:
            heapq.heappush(asks, (now + wait + rng.uniform(0, 2), seq, turn, slept + 1))
        else:
            republished += 1
            back = now + wait + rng.uniform(0, late_ms) + rng.uniform(0, claim_ms)
            heapq.heappush(asks, (back, seq, turn, 0))
    return sorted(starts), republished


def most_in_window(starts: list[float], window_ms: float) -> int:
    best, lo = 0, 0
    for hi, at in enumerate(starts):
        while starts[lo] <= at - window_ms:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_no_window_holds_more_than_the_limit_and_the_limit_is_used(seed: int) -> None:
    starts, republished = simulate(20, 1, 400, seed)
    assert len(starts) == 400
    assert most_in_window(starts, 1000) <= 20
    span_s = (starts[-1] - starts[0]) / 1000
    assert 399 / span_s == pytest.approx(20, rel=0.05)  # late deliveries waste nothing
    assert republished <= 2 * 400


def test_a_burst_goes_at_once_and_the_window_still_holds() -> None:
    turn, now = Turn("k", 10, 1000.0, burst=5), 10_000.0
    state = RateState()
    waits = []
    for _ in range(8):
        wait, _, state = ask(state, turn, now)
        waits.append(wait)
    assert waits[:5] == [0] * 5  # the burst, at once
    assert waits[5:] == [100, 200, 300]  # then one interval apart
    starts, _ = simulate(10, 5, 200, 7)
    assert most_in_window(starts, 1000) <= 10  # a burst never overfills a window


def test_units_count_as_that_many_starts() -> None:
    now = 10_000.0
    wait, _, state = ask(RateState(), Turn("k", 4, 1000.0, burst=4, units=4), now)
    assert wait == 0 and len(state.grants) == 4
    wait, _, state = ask(state, Turn("k", 4, 1000.0, burst=4), now + 10)
    assert wait == 990  # the window is full until the four units leave it


def test_state_older_than_a_window_is_forgotten() -> None:
    state = RateState(line=0.0, grants=(5.0, 4.0), plans=((5.0, 2), (4.0, 1)), seq=2)
    assert state.aged(2000.0, 1000.0) == RateState(0.0, (), (), 2)
    wait, _, new = ask(state, Turn("k", 2, 1000.0), 2000.0)
    assert wait == 0 and new.grants == (2000.0,)


def test_several_limits_grant_together_or_not_at_all() -> None:
    now = 10_000.0
    free = RateState()
    busy = RateState(line=now, grants=tuple(now - 509 - i for i in range(10)))  # full
    turns = [Turn("a", 10, 1000.0), Turn("b", 10, 1000.0)]
    wait, made, (a, b) = decide([free, busy], turns, now)
    assert wait == 482  # b's window
    assert a.grants == ()  # nothing granted on a
    assert [t.slot_ms for t in made] == [10_482, 10_482]  # a place in both lines
    wait, _, _ = decide([a, b], made, now + 482)
    assert wait == 0


def test_a_fresh_delivery_takes_the_room_there_is_else_a_place_at_the_end() -> None:
    now = 10_000.0
    plans = ((now + 200, 3), (now + 100, 2), (now, 1))
    waiting = RateState(line=now + 300, grants=(now - 100,), plans=plans, seq=3)
    wait, _, _ = ask(waiting, Turn("k", 10, 1000.0), now)
    assert wait == 0  # room in the window now: taken, whoever waits in line
    full = replace(waiting, grants=tuple(now - 981 - i for i in range(10)))  # newest first
    wait, turn, state = ask(full, Turn("k", 10, 1000.0), now)
    assert wait == 300 and turn.slot_ms == now + 300 and state.line == now + 400
    # a reserved one only needs room in the window: coming late takes nothing from others
    wait, kept, _ = ask(waiting, Turn("k", 10, 1000.0, slot_ms=int(now + 100)), now + 150)
    assert wait == 0
    wait, kept, _ = ask(full, Turn("k", 10, 1000.0, slot_ms=9_000), now)
    assert wait == 10 and kept.slot_ms == 9_000  # short: keeps its place, waits in-process
    wait, kept, _ = ask(full, Turn("k", 10, 1000.0, slot_ms=9_000), now - 100)
    assert wait == 110 and kept.slot_ms == 9_000  # late and far: still its place, not the end


def test_deliveries_that_came_late_try_again_one_interval_apart() -> None:
    now = 10_000.0
    full = RateState(line=now + 500, grants=tuple(now - 900 - i for i in range(10)))
    waits = []
    for slot in (9_000, 9_100, 9_200):
        wait, kept, full = ask(full, Turn("k", 10, 1000.0, slot_ms=slot), now)
        waits.append(wait)
        assert kept.slot_ms == slot
    assert waits == [91, 191, 291]  # not all at once when the window frees


def test_heavy_lateness_costs_throughput_not_the_limit() -> None:
    starts, republished = simulate(10, 1, 200, 3, late_ms=1500)
    assert most_in_window(starts, 1000) <= 10
    print(
        f"\nlate up to 1.5 s: {(len(starts) - 1) / ((starts[-1] - starts[0]) / 1000):.2f}/s, "
        f"{republished / 200:.2f} re-publishes per job"
    )
    assert republished <= 4 * 200


def test_a_start_up_to_half_an_interval_late_keeps_the_schedule() -> None:
    turn, state = Turn("k", 20, 1000.0), RateState()  # one start every 50 ms
    _, _, state = ask(state, turn, 10_000.0)
    _, _, state = ask(state, turn, 10_070.0)  # 20 ms late (due at 10,050)
    assert state.tat == 10_100.0  # the next is due on time, not at 10,120
    assert ask(state, turn, 10_099.0)[0] > 0 and ask(state, turn, 10_100.0)[0] == 0
    _, _, state = ask(state, turn, 10_200.0)  # 100 ms late: the schedule starts again
    assert state.tat == 10_250.0


def test_free_at_says_when_a_fresh_delivery_may_start() -> None:
    turn, state = Turn("k", 2, 1000.0, burst=2), RateState()
    _, _, state = ask(state, turn, 0.0)
    assert free_at(state, turn, 0.0) == 0.0  # the burst has room
    _, _, state = ask(state, turn, 10.0)
    assert free_at(state, turn, 10.0) == 1000.0  # the window is full until the first ages
    wait, _, _ = ask(state, turn, 500.0)
    assert wait > 0  # a hint still ahead: surely refused
