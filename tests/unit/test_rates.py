"""Keyed rate limits (issue 27, item 1): the option, and the GCRA decisions of
``core/rates.py`` with the in-process limiter's clock replaced by a simulated one."""

from __future__ import annotations

import random
from collections import deque

import pytest

from celery_tracked.core.errors import InvalidPayload, InvalidTaskOption
from celery_tracked.core.rates import (
    HEADER_RATE_TURNS,
    RateLimit,
    RateState,
    Turn,
    decide,
    digest,
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
    assert one == RateLimit("ai:{tenant_id}", "20/s")
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
    assert [(t.key, t.units, t.slot_ms) for t in turns] == [("ai:t1", 1, None), ("tok", 7, None)]
    header = turns_header([Turn("ai:t1", 100, 1, 1, 123)])
    assert header == {HEADER_RATE_TURNS: {digest("ai:t1"): 123}}
    assert "t1" not in str(header)  # the key may hold a secret argument
    again = turns_of(limits, {"tenant": "t1", "n": 7}, (), {}, header[HEADER_RATE_TURNS])
    assert again[0].slot_ms == 123 and again[1].slot_ms is None
    with pytest.raises(InvalidPayload, match="units"):
        turns_of(limits, {"tenant": "t1", "n": 51}, (), {})
    with pytest.raises(InvalidPayload):
        turns_of(limits, {"n": 1}, (), {})  # no tenant to make the key of


def simulate(
    rate_per_s: int, burst: int, deliveries: int, workers: int, seed: int, late_ms: float = 30
) -> list[float]:
    """Deliveries arriving on ``workers`` at random (each re-published delivery comes back
    late by up to ``late_ms``), claims taking random time; the starts granted."""
    rng = random.Random(seed)
    interval = 1000 / rate_per_s
    state = RateState()
    starts: list[float] = []
    # (time it asks, its turn)
    pending: deque[tuple[float, Turn]] = deque(
        (rng.uniform(0, 50), Turn("k", interval, burst, 1)) for _ in range(deliveries)
    )
    republished = 0
    while pending:
        pending = deque(sorted(pending, key=lambda p: p[0]))
        now, turn = pending.popleft()
        now += rng.uniform(0, 20)  # its claim
        for _ in range(4):  # as KeyedRateLimit: a short wait slept in-process, asked again
            wait, (turn,), (state,) = decide([state], [turn], now, short_ms=50)
            if wait == 0 or wait > 50:
                break
            now += wait
        if wait == 0:
            starts.append(now)
        else:
            republished += 1
            pending.append((now + wait + rng.uniform(0, late_ms), turn))
    assert republished <= 3 * deliveries, republished
    return sorted(starts)


def most_in_window(starts: list[float], window_ms: float) -> int:
    best, lo = 0, 0
    for hi, at in enumerate(starts):
        while starts[lo] <= at - window_ms:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_no_window_holds_more_than_the_limit(seed: int) -> None:
    starts = simulate(20, 1, 400, 6, seed)
    assert len(starts) == 400
    assert most_in_window(starts, 1000) <= 20
    span_s = (starts[-1] - starts[0]) / 1000
    assert 399 / span_s == pytest.approx(20, rel=0.1)  # the limit is used, not wasted


def test_a_burst_goes_at_once_then_the_rate() -> None:
    state, now = RateState(tat=0, line=0), 10_000.0
    turns = [Turn("k", 100, 5, 1)]
    granted = 0
    for _ in range(8):
        wait, _, (state,) = decide([state], turns, now, short_ms=0)
        granted += wait == 0
    assert granted == 5  # the burst, at once
    wait, (turn,), (state,) = decide([state], turns, now, short_ms=0)
    assert wait > 100  # behind the three already waiting in line
    starts = simulate(10, 5, 200, 6, 7)
    assert most_in_window(starts, 1000) <= 10 + 5 - 1  # the documented bound with a burst


def test_units_cost_several_intervals() -> None:
    state, now = RateState(tat=0, line=0), 10_000.0
    heavy = [Turn("k", 100, 4, 4)]
    wait, _, (state,) = decide([state], heavy, now, short_ms=0)
    assert wait == 0
    wait, _, (state,) = decide([state], [Turn("k", 100, 4, 1)], now, short_ms=0)
    assert wait == 100  # the four units spent: one interval until the next unit


def test_an_empty_state_is_taken_as_a_burst_just_granted() -> None:
    wait, (turn,), (state,) = decide([RateState()], [Turn("k", 50, 1, 1)], 1000.0, 0)
    assert wait == 50 and turn.slot_ms == 1050


def test_several_limits_grant_together_or_not_at_all() -> None:
    now = 10_000.0
    free, busy = RateState(tat=0, line=0), RateState(tat=now + 500, line=now + 500)
    turns = [Turn("a", 100, 1, 1), Turn("b", 100, 1, 1)]
    wait, made, (a, b) = decide([free, busy], turns, now, short_ms=0)
    assert wait == 500  # b's line
    assert a.tat == free.tat  # nothing granted on a
    assert [t.slot_ms for t in made] == [10_500, 10_500]  # a place in both lines
    wait, _, _ = decide([a, b], made, now + 500, short_ms=0)
    assert wait == 0


def test_a_fresh_delivery_does_not_overtake_the_line() -> None:
    now = 10_000.0
    state = RateState(tat=now - 1, line=now + 300)  # three waiting
    wait, (turn,), (state,) = decide([state], [Turn("k", 100, 1, 1)], now, short_ms=0)
    assert wait == 300 and state.line == now + 400
    # a reserved one a little early keeps its place (and waits in-process)
    late = RateState(tat=now + 300, line=now + 400)  # the line's starts came late
    wait, (moved,), _ = decide([late], [Turn("k", 100, 1, 1, 10_100)], now, short_ms=50)
    assert wait == 400 and moved.slot_ms == 10_400  # far: a new place at the end
    wait, (kept,), _ = decide(
        [RateState(tat=now + 30, line=now + 400)], [Turn("k", 100, 1, 1, 10_030)], now, 50
    )
    assert wait == 30 and kept.slot_ms == 10_030


def test_reserve_only_never_grants() -> None:
    wait, (turn,), _ = decide([RateState(tat=0, line=0)], [Turn("k", 100, 1, 1)], 1e4, 0, True)
    assert wait >= 1 and turn.slot_ms is not None
