"""Keyed rate limits: the task option ``rate_limits`` and the pure GCRA decisions.

``@tracked_task(rate_limits=("ai:{tenant_id}", "20/s"))``: at most 20 bodies start per
second for each value of the key, across all workers and every task naming the same key.
Several limits are a list (``[("ai:{tenant_id}", "100/m"), ("ai", "50/s")]``: a start needs
all of them); a :class:`RateLimit` spells the rest: ``burst`` (how many may start back to
back after a quiet spell, default 1: evenly spaced) and ``units`` (what one call costs: an
integer, the name of an integer argument, or a callable taking the call's arguments).

The key is a template over the call's arguments, like ``concurrency_key`` (``calls.py``),
or a callable; ``{tenant}`` names the job's tenant when the task declares ``tenant=`` and
has no argument of that name (``tenants.py``).

The limiter is a GCRA (generic cell rate algorithm) per key: one start costs
``units * interval`` (``interval = window / count``), and a start is granted while the
theoretical arrival time (``tat``) stays within ``burst * interval`` of now. Granted starts
are counted when they are granted, just before the body (:func:`decide`, run after the
claim): the grant is the start. A delivery refused takes a place at the end of its key's
waiting line (``line``, a second GCRA cursor over the reservations), so the deliveries that
wait come back one interval apart instead of all at once, and a fresh delivery does not
overtake them. With ``burst`` 1 no window of ``window`` seconds ever holds more than
``count`` starts of one key; with ``burst`` B at most ``count + B - 1``.

Pure: no Redis, SQL or Celery here (the Lua twin is in ``backends/limiter.py``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .calls import KeyCall, check_template
from .errors import InvalidPayload, InvalidTaskOption

#: The tracked option of this module.
RATE_OPTIONS = ("rate_limits",)
#: The places in line a delivery took, carried by the message it was re-published as:
#: ``{digest of the key: slot (Redis milliseconds)}`` (a digest: a key may hold a secret
#: argument, and headers are shown by monitors).
HEADER_RATE_TURNS = "tracked_rate_turns"
#: The longest window (one day) and the largest count.
MAX_WINDOW_S = 86_400
MAX_COUNT = 1_000_000

_WINDOWS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60}
_WINDOWS |= {"h": 3600, "hour": 3600, "d": 86_400, "day": 86_400}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*$")


@dataclass(frozen=True)
class RateLimit:
    """One keyed rate limit: ``count`` starts per ``window`` for each value of ``key``.

    Args:
        key: a ``str.format`` template over the call's arguments (``"ai:{tenant_id}"``),
            or a callable taking the call's arguments; a constant string is one limit
            shared by every call.
        rate: ``"N/s"``, ``"N/m"``, ``"N/h"``, ``"N/d"``, or with a multiple:
            ``"100/10s"``.
        burst: how many may start back to back after a quiet spell (default 1: evenly
            spaced, ``window / N`` apart). A rolling window then holds at most
            ``N + burst - 1`` starts.
        units: what one call costs (default 1): an integer, the name of an integer
            argument, or a callable taking the call's arguments; at most ``burst``.
    """

    key: str | Callable[..., str]
    rate: str
    burst: int = 1
    units: int | str | Callable[..., int] = 1

    @property
    def interval_ms(self) -> float:
        """Milliseconds one unit costs (``window / count``)."""
        count, window_s = parse_rate(self.rate)
        return window_s * 1000 / count


def parse_rate(rate: Any) -> tuple[int, int]:
    """``(count, window seconds)`` of ``"20/s"``, ``"100/m"``, ``"5/10s"``...

    Raises:
        InvalidTaskOption: not such a rate.
    """
    found = _RATE.match(rate) if isinstance(rate, str) else None
    unit = _WINDOWS.get(found.group(3)) if found else None
    if found is None or unit is None:
        raise InvalidTaskOption(
            "rate_limits", f"a rate is 'N/s', 'N/m', 'N/h', 'N/d' or 'N/10s', got {rate!r}"
        )
    count, window = int(found.group(1)), int(found.group(2) or 1) * unit
    if not 1 <= count <= MAX_COUNT or not 1 <= window <= MAX_WINDOW_S:
        raise InvalidTaskOption(
            "rate_limits",
            f"{rate!r}: the count must be 1-{MAX_COUNT} and the window 1 s to 1 day",
        )
    return count, window


def rates_of(value: Any) -> tuple[RateLimit, ...]:
    """The limits ``rate_limits=`` declares: one ``(key, rate)``/:class:`RateLimit`, or a
    list of them; None: none. Checked.

    Raises:
        InvalidTaskOption: names what is wrong.
    """
    if value is None:
        return ()
    if isinstance(value, RateLimit) or (isinstance(value, tuple) and _pair(value)):
        value = [value]
    if not isinstance(value, list | tuple) or not value:
        raise InvalidTaskOption(
            "rate_limits",
            f"must be (key, rate), a RateLimit or a list of them, got {value!r}",
        )
    return tuple(_one(item) for item in value)


def _pair(value: tuple[Any, ...]) -> bool:
    return len(value) == 2 and isinstance(value[1], str)


def _one(item: Any) -> RateLimit:
    if isinstance(item, tuple | list) and len(item) == 2:
        item = RateLimit(item[0], item[1])
    if not isinstance(item, RateLimit):
        raise InvalidTaskOption("rate_limits", f"each limit is (key, rate), got {item!r}")
    check_template(item.key, "rate_limits")
    parse_rate(item.rate)
    burst = item.burst
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_COUNT:
        raise InvalidTaskOption("rate_limits", f"burst must be 1-{MAX_COUNT}, got {burst!r}")
    units = item.units
    if isinstance(units, bool) or (isinstance(units, int) and not 1 <= units <= burst):
        raise InvalidTaskOption(
            "rate_limits", f"units must be 1 to the burst ({burst}), got {units!r}"
        )
    if not isinstance(units, int | str) and not callable(units):
        raise InvalidTaskOption(
            "rate_limits", f"units: an integer, an argument name or a callable, got {units!r}"
        )
    return item


@dataclass(frozen=True)
class Turn:
    """One limit as it applies to one delivery: its key (rendered), the milliseconds of
    one unit, the burst, the units this call costs, and its place in line (Redis
    milliseconds) when an earlier delivery of the message took one."""

    key: str
    interval_ms: float
    burst: int
    units: int
    slot_ms: int | None = None

    @property
    def span_ms(self) -> float:
        return self.burst * self.interval_ms

    @property
    def cost_ms(self) -> float:
        return self.units * self.interval_ms


def turns_of(
    limits: Sequence[RateLimit],
    named: Mapping[str, Any],
    args: Any,
    kwargs: Any,
    reserved: Any = None,
) -> tuple[Turn, ...]:
    """The turns one call asks for (``named``: its arguments by name, and ``tenant``);
    ``reserved``: the message's ``tracked_rate_turns`` header.

    Raises:
        InvalidPayload: a key or the units cannot be made of the arguments.
    """
    call = KeyCall("", args, kwargs, named)
    slots = reserved if isinstance(reserved, dict) else {}
    turns = []
    for limit in limits:
        key = call.build("rate_limits", limit.key)
        slot = slots.get(digest(key))
        turns.append(
            Turn(
                key,
                limit.interval_ms,
                limit.burst,
                _units(limit, named, args, kwargs),
                int(slot) if isinstance(slot, int | float) and slot >= 0 else None,
            )
        )
    return tuple(turns)


def _units(limit: RateLimit, named: Mapping[str, Any], args: Any, kwargs: Any) -> int:
    units: Any = limit.units
    try:
        if callable(units):
            units = units(*args, **kwargs)
        elif isinstance(units, str):
            units = named[units]
    except Exception as exc:
        raise InvalidPayload(
            f"rate_limits: cannot count the units of the call: {type(exc).__name__}"
        ) from None
    if isinstance(units, bool) or not isinstance(units, int) or not 1 <= units <= limit.burst:
        raise InvalidPayload(
            f"rate_limits: a call's units must be an integer from 1 to the burst "
            f"({limit.burst}), got {units!r}"
        )
    return units


def turns_header(turns: Sequence[Turn]) -> dict[str, Any]:
    """The header telling the next delivery its places in line."""
    return {HEADER_RATE_TURNS: {digest(t.key): t.slot_ms for t in turns if t.slot_ms is not None}}


def digest(key: str) -> str:
    """A key as its message carries it (not the key: it may hold a secret argument)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:20]


@dataclass(frozen=True)
class RateState:
    """One key's state (its limiter's milliseconds): ``tat``, the theoretical arrival time
    after the starts granted; ``line``, the end of the waiting line (reservations
    included). Both None: no state (first use, or a Redis that lost it)."""

    tat: float | None = None
    line: float | None = None


def recovered(state: RateState, now_ms: float, span_ms: float) -> RateState:
    """An empty state is taken as a full burst granted ``now_ms`` (first use and a lost
    state cannot be told apart): no start is granted that a lost one would have refused."""
    if state.tat is None:
        return RateState(now_ms + span_ms, now_ms + span_ms)
    return state if state.line is not None else replace(state, line=state.tat)


def decide(
    states: Sequence[RateState],
    turns: Sequence[Turn],
    now_ms: float,
    short_ms: float,
    reserve_only: bool = False,
) -> tuple[int, tuple[Turn, ...], tuple[RateState, ...]]:
    """``(wait_ms, turns, new states)`` for a delivery asking to start now.

    Granted (``wait_ms`` 0) when every limit allows it: a fresh turn (no place in line)
    at its place at the end of the line, a reserved one when its key's ``tat`` allows
    (``tat + cost - span <= now``); every key then records the start. Otherwise nothing
    is granted: each fresh turn, and each reserved turn refused by more than
    ``short_ms``, takes a place at the end of its line no earlier than the latest of
    them (``wait_ms`` until it comes); a reserved turn refused by less keeps its place
    (the caller waits in-process and asks again). ``reserve_only``: never grant (a
    delivery that knows its key is busy, before its claim). ``backends/limiter.py``'s
    Lua script is this function."""
    states = [recovered(s, now_ms, t.span_ms) for s, t in zip(states, turns, strict=True)]
    ats = []
    for state, turn in zip(states, turns, strict=True):
        tat = max(state.tat or now_ms, now_ms)
        place = max(state.line or now_ms, tat) if turn.slot_ms is None else tat
        ats.append(place + turn.cost_ms - turn.span_ms)
    latest = max(ats)
    if latest <= now_ms and not reserve_only:
        granted = []
        for state, turn in zip(states, turns, strict=True):
            tat = max(state.tat or now_ms, now_ms)
            line = state.line or now_ms
            if turn.slot_ms is None:
                line = max(line, tat) + turn.cost_ms
            granted.append(RateState(tat + turn.cost_ms, line))
        return 0, tuple(turns), tuple(granted)
    latest = max(latest, now_ms)
    new_turns, new_states, waits = [], [], []
    for state, turn, at in zip(states, turns, ats, strict=True):
        if turn.slot_ms is not None and at - now_ms <= short_ms:
            new_turns.append(turn)
            new_states.append(state)
            waits.append(at - now_ms)
            continue
        line = max(state.line or now_ms, state.tat or now_ms, now_ms) + turn.cost_ms
        line = max(line, latest + turn.span_ms)
        slot = line - turn.span_ms
        new_turns.append(replace(turn, slot_ms=math.ceil(slot)))
        new_states.append(replace(state, line=line))
        waits.append(slot - now_ms)
    return max(1, math.ceil(max(waits))), tuple(new_turns), tuple(new_states)
