"""Keyed rate limits: the task option ``rate_limits`` and the pure GCRA decisions.

``@tracked_task(rate_limits=("ai:{tenant_id}", "20/s"))``: at most 20 bodies start per
second for each value of the key, across all workers and every task naming the same key.
Several limits are a list (``[("ai:{tenant_id}", "100/m"), ("ai", "50/s")]``: a start needs
all of them); a :class:`RateLimit` spells the rest: ``burst`` (how many may start back to
back after a quiet spell, default N: N in any window) and ``units`` (what one call costs: an
integer, the name of an integer argument, or a callable taking the call's arguments).

The key is a template over the call's arguments, like ``concurrency_key`` (``calls.py``),
or a callable; ``{tenant}`` names the job's tenant when the task declares ``tenant=`` and
has no argument of that name (``tenants.py``).

The limiter, per key, one Lua script per start (:func:`decide`): a start is granted only
if the key's starts of the last ``window`` (a sorted set of their times) leave room for
it, so no window of ``window`` seconds ever holds more than ``count`` starts (units) of one
key, however late the deliveries come; it is granted after the claim, immediately before
the body: the grant is the start. A fresh delivery takes the room there is now (within the
burst: a GCRA over the starts); refused, it takes a place at the end of its key's waiting
line, a GCRA cursor (one interval, ``window / count``, per unit; ``burst`` at once) bounded
by the same window over the places taken, so the deliveries that wait come back one
interval apart instead of all at once.

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
#: Each window is counted this much longer than its rate says (ms): a body starts a few
#: ms after its grant (its process is scheduled, Celery calls it), so N grants in any
#: window this much longer keep N body starts in any window of the rate's length while
#: that latency stays under it (docs/limits.md, "The guarantee").
START_MARGIN_MS = 25.0
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
        burst: how many may start back to back after a quiet spell, 1 to N (default N:
            "N per window" means up to N in any window; 1: evenly spaced, ``window / N``
            apart). Any window holds at most N starts whatever the burst.
        units: what one call costs (default 1): an integer, the name of an integer
            argument, or a callable taking the call's arguments; at most ``burst``.
    """

    key: str | Callable[..., str]
    rate: str
    burst: int | None = None
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
    count, _ = parse_rate(item.rate)
    burst = count if item.burst is None else item.burst
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= count:
        raise InvalidTaskOption("rate_limits", f"burst must be 1 to N ({count}), got {burst!r}")
    units = item.units
    if isinstance(units, bool) or (isinstance(units, int) and not 1 <= units <= burst):
        raise InvalidTaskOption(
            "rate_limits", f"units must be 1 to the burst ({burst}), got {units!r}"
        )
    if not isinstance(units, int | str) and not callable(units):
        raise InvalidTaskOption(
            "rate_limits", f"units: an integer, an argument name or a callable, got {units!r}"
        )
    return replace(item, burst=burst)


@dataclass(frozen=True)
class Turn:
    """One limit as it applies to one delivery: its key (rendered), ``count`` starts per
    ``window_ms``, the burst, the units this call costs, and its place in line (Redis
    milliseconds) when an earlier delivery of the message took one."""

    key: str
    count: int
    window_ms: float
    burst: int = 1
    units: int = 1
    slot_ms: int | None = None
    #: the id of its place in the line's plans (given back when it takes a new place)
    seq: int | None = None

    @property
    def interval_ms(self) -> float:
        return self.window_ms / self.count

    @property
    def span_ms(self) -> float:
        return min(self.burst, self.count) * self.interval_ms

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
    places = reserved if isinstance(reserved, dict) else {}
    turns = []
    for limit in limits:
        key = call.build("rate_limits", limit.key)
        slot, seq = _place(places.get(digest(key)))
        count, window_s = parse_rate(limit.rate)
        turns.append(
            Turn(
                key,
                count,
                window_s * 1000.0 + START_MARGIN_MS,
                limit.burst or count,
                _units(limit, named, args, kwargs),
                slot,
                seq,
            )
        )
    return tuple(turns)


def _place(value: Any) -> tuple[int | None, int | None]:
    """``(slot, seq)`` of a header's place (``[slot, seq]``), or ``(None, None)``."""
    ok = isinstance(value, list | tuple) and len(value) == 2
    if ok and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return int(value[0]), int(value[1])
    return None, None


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
    burst = limit.burst or parse_rate(limit.rate)[0]
    if isinstance(units, bool) or not isinstance(units, int) or not 1 <= units <= burst:
        raise InvalidPayload(
            f"rate_limits: a call's units must be an integer from 1 to the burst "
            f"({burst}), got {units!r}"
        )
    return units


def turns_header(turns: Sequence[Turn]) -> dict[str, Any]:
    """The header telling the next delivery its places in line."""
    return {
        HEADER_RATE_TURNS: {
            digest(t.key): [t.slot_ms, t.seq or 0] for t in turns if t.slot_ms is not None
        }
    }


def digest(key: str) -> str:
    """A key as its message carries it (not the key: it may hold a secret argument)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:20]


@dataclass(frozen=True)
class RateState:
    """One key's state (its limiter's milliseconds): ``line``, the end of its waiting line
    (a GCRA cursor over the starts granted and the places taken); ``grants``, the starts
    granted within the last window, newest first (one entry per unit); ``plans``, the same
    with the places taken in line (their slots). Empty: never used, or idle for a window
    (a Redis that lost the state forgets the starts of the last window, see
    docs/limits.md)."""

    line: float | None = None
    grants: tuple[float, ...] = ()
    #: ``(time, id)`` of each unit of a place, newest first
    plans: tuple[tuple[float, int], ...] = ()
    #: the last id given to a place's unit
    seq: int = 0
    #: when the next delivery that came late and found the window full may try again
    late: float | None = None
    #: the theoretical arrival time after the starts granted (GCRA: the burst)
    tat: float | None = None

    def aged(self, now_ms: float, window_ms: float) -> RateState:
        """Without what ended more than a window ago (it limits nothing any more)."""
        since = now_ms - window_ms
        return replace(
            self,
            grants=tuple(t for t in self.grants if t > since),
            plans=tuple(p for p in self.plans if p[0] > since),
        )

    def planned(self, at: float, units: int) -> RateState:
        """With a place of ``units`` at ``at`` (ids ``seq + 1``...)."""
        new = tuple((at, self.seq + 1 + k) for k in range(units))
        return replace(
            self, plans=tuple(sorted((*self.plans, *new), reverse=True)), seq=self.seq + units
        )


def cap(times: Sequence[float], turn: Turn) -> float:
    """The earliest time ``turn``'s units fit in any window of ``times`` (newest first):
    the ``count - units + 1``-th newest plus the window; -inf when fewer."""
    index = turn.count - turn.units
    return times[index] + turn.window_ms if len(times) > index else -math.inf


def _end_of_line(state: RateState, turn: Turn, now_ms: float) -> float:
    """The earliest place at the end of ``state``'s line for ``turn``: paced by the line
    (``burst`` at once), and no window holding more than ``count`` places."""
    base = max(state.line or now_ms, now_ms) + turn.cost_ms
    return max(base - turn.span_ms, cap(_times(state), turn))


def _times(state: RateState) -> list[float]:
    return [p[0] for p in state.plans]


def _with(times: tuple[float, ...], at: float, units: int) -> tuple[float, ...]:
    return tuple(sorted((*times, *(at,) * units), reverse=True))


def _paced(tat: float | None, now_ms: float, turn: Turn) -> float:
    """The burst's schedule after a start at ``now_ms``: one interval per unit after the
    time it was due (``tat``) when it came at most half an interval late (a delivery's
    latency is not lost for good: the next start is due on time), else after now."""
    late = tat is None or now_ms - tat > turn.interval_ms / 2
    return (now_ms if late or tat is None else tat) + turn.cost_ms


def free_at(state: RateState, turn: Turn, now_ms: float) -> float:
    """The earliest time a fresh delivery of one unit of ``turn``'s key may be granted,
    given ``state``: later ones only push it later (a hint before the claim)."""
    one = replace(turn, units=1)
    return max(
        cap(state.aged(now_ms, turn.window_ms).grants, one),
        max(state.tat or now_ms, now_ms) + one.cost_ms - turn.span_ms,
    )


def decide(
    states: Sequence[RateState],
    turns: Sequence[Turn],
    now_ms: float,
    grant: bool = True,
) -> tuple[int, tuple[Turn, ...], tuple[RateState, ...]]:
    """``(wait_ms, turns, new states)`` for a delivery asking to start now; ``grant``
    False (before the claim): room now is not taken (``(0, turns, states)``), only a
    place in line when there is none.

    A start is granted when every limit allows it: never more than ``count`` units in
    any window of ``window_ms`` (``grants``). A fresh turn (no place in line) must also
    keep the burst (``tat``, one interval per unit, ``burst`` at once): it takes the room
    there is now, even with deliveries waiting in line (those that come back late find it
    taken, rather than the room being lost while they are late); a reserved turn only
    needs the window. Granted: each key records the start.
    Otherwise nothing is granted: each fresh turn takes a place at the end of its line
    (``line``, paced as the burst allows, and no window of places, ``plans``, holding more
    than ``count``), all no earlier than the latest of them (``wait_ms`` until it
    comes); a reserved turn
    keeps its place and waits for room in its window (a delivery that came late is not
    sent to the end of the line), those that came late one interval apart (``late``) so
    that they do not all come back at once.
    ``backends/limiter.py``'s Lua script is this function."""
    states = [s.aged(now_ms, t.window_ms) for s, t in zip(states, turns, strict=True)]
    ats = []
    for state, turn in zip(states, turns, strict=True):
        at = cap(state.grants, turn)
        if turn.slot_ms is None:  # room now, and no closer than the burst allows
            at = max(at, max(state.tat or now_ms, now_ms) + turn.cost_ms - turn.span_ms)
        ats.append(at)
    latest = max(ats)
    if latest <= now_ms and not grant:
        return 0, tuple(turns), tuple(states)
    if latest <= now_ms:
        granted = []
        for state, turn in zip(states, turns, strict=True):
            tat = _paced(state.tat, now_ms, turn)
            state = replace(state, grants=_with(state.grants, now_ms, turn.units), tat=tat)
            if turn.slot_ms is None:
                state = state.planned(now_ms, turn.units)
                state = replace(state, line=max(state.line or now_ms, now_ms) + turn.cost_ms)
            granted.append(state)
        return 0, tuple(turns), tuple(granted)
    for state, turn in zip(states, turns, strict=True):  # the places are taken together
        if turn.slot_ms is None:
            latest = max(latest, _end_of_line(state, turn, now_ms))
    latest = max(latest, now_ms)
    new_turns, new_states, waits = [], [], []
    for state, turn, at in zip(states, turns, ats, strict=True):
        if turn.slot_ms is not None:  # late ones wait their turn, one interval apart
            if at > now_ms:
                at = max(at, state.late or at)
                state = replace(state, late=at + turn.cost_ms)
            new_turns.append(turn)
            new_states.append(state)
            waits.append(at - now_ms)
            continue
        base = max(state.line or now_ms, now_ms) + turn.cost_ms
        slot = max(_end_of_line(state, turn, now_ms), latest)
        state = state.planned(slot, turn.units)
        state = replace(state, line=max(base, slot + turn.cost_ms))
        new_turns.append(replace(turn, slot_ms=math.ceil(slot), seq=state.seq - turn.units + 1))
        new_states.append(state)
        waits.append(slot - now_ms)
    return max(1, math.ceil(max(waits))), tuple(new_turns), tuple(new_states)
