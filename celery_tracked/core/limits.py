"""Global rate limits and per-key concurrency limits: the task options and the pure decisions.

Two tracked options, checked when the task is declared (``InvalidTaskOption``):

``rate_limit_global=("ai-provider", 2000)`` (a limiter name and a minimum interval in
    milliseconds), or just ``"ai-provider"`` (the interval is then
    ``tracked_rate_limit_ms``). Every task
    naming one limiter shares it, across all workers: their bodies start at least the
    interval apart. A delivery that must wait reserves its slot and is re-published for it
    (``limiter.py``), without using an attempt or holding a pool process; the start itself
    is granted after the claim, just before the body (``grant_start``).
``concurrency_key="course:{course_id}"`` (a template over the call's arguments like
    ``idempotency_key``, or a callable) with ``concurrency_limit=N`` (default
    ``tracked_concurrency_limit``): at
    most N jobs with that key are ``processing`` under a live lease at any time, across
    all workers and task types. The slot is the job's own fenced lease, not a counter: a
    worker that dies frees it when its lease lapses. When a keyed job ends, its slot is
    handed to the key's next due waiting job (``services/handoff.py``).
``fairness_key="tenant:{tenant_id}"`` (with a ``concurrency_key``; the same kinds): the
    jobs of one concurrency key take its slots in turn by fairness key (round-robin): a
    slot freed by a job of one fairness key is handed to the next fairness key that has a
    due job waiting, in the keys' order, oldest job first within one.

Pure: no Redis, SQL or Celery here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .calls import KeyCall, check_template
from .errors import InvalidPayload, InvalidTaskOption

if TYPE_CHECKING:
    from .calls import CallShape
    from .settings import Settings

#: The tracked options of this module.
LIMIT_OPTIONS = ("rate_limit_global", "concurrency_key", "concurrency_limit", "fairness_key")
#: The slot a delivery reserved, carried by the message it was re-published as:
#: ``"<limiter name>@<slot, Redis milliseconds>"``.
HEADER_RATE_SLOT = "tracked_rate_slot"
#: The ``locked_by`` of a waiting row a freed concurrency slot was handed to
#: (``services/handoff.py``): it holds that slot until its delivery claims it, or until
#: ``HANDOFF_S`` seconds (the database's clock) have passed.
SLOT_HANDED = "slot-handed"
#: How long a handed slot waits for its job's delivery before any waiting job may take it.
HANDOFF_S = 30.0
#: Width of the ``concurrency_key`` column.
MAX_CONCURRENCY_KEY = 255
#: A limiter name's longest length (it is part of a Redis key).
MAX_LIMITER_NAME = 200


@dataclass(frozen=True)
class Limits:
    """A task's declared limits (None: not limited, or the setting's default)."""

    rate_name: str | None = None
    rate_interval_ms: int | None = None
    concurrency_key: str | Callable[..., str] | None = None
    concurrency_limit: int | None = None
    fairness_key: str | Callable[..., str] | None = None

    def key_of(self, shape: CallShape, args: Any, kwargs: Any) -> str | None:
        """The call's concurrency key (stored in its row at enqueue).

        Raises:
            InvalidPayload: the arguments cannot make a key.
        """
        template = self.concurrency_key
        if template is None:
            return None
        named = shape.bind(args, kwargs, "")  # defaults applied, as at enqueue (calls.py)
        return concurrency_key(template, named, args, kwargs)

    def fairness_of(self, shape: CallShape, args: Any, kwargs: Any) -> str | None:
        """The call's fairness key (stored in its row at enqueue; None: not declared).

        Raises:
            InvalidPayload: the arguments cannot make a key.
        """
        template = self.fairness_key
        if template is None:
            return None
        named = shape.bind(args, kwargs, "")
        return KeyCall("", args, kwargs, named).build("fairness_key", template)

    def for_delivery(
        self,
        shape: CallShape,
        args: Any,
        kwargs: Any,
        request: Any,
        settings: Settings,
    ) -> DeliveryLimits | None:
        """The limits of one delivery: the interval and limit resolved (defaults:
        ``tracked_rate_limit_ms``, ``tracked_concurrency_limit``), the slot its message
        reserved (a header of Celery's ``request``), its concurrency key (as at enqueue;
        None if the arguments cannot make it, which the enqueue would have refused)."""
        if self.rate_name is None and self.concurrency_key is None:
            return None
        try:
            key = self.key_of(shape, args, kwargs)
            fair = self.fairness_of(shape, args, kwargs)
        except InvalidPayload:
            key = fair = None
        return DeliveryLimits(
            rate_name=self.rate_name,
            interval_ms=self.rate_interval_ms or settings.rate_limit_ms,
            reserved_ms=reserved_slot(_header(request, HEADER_RATE_SLOT), self.rate_name),
            key=key,
            limit=self.concurrency_limit or settings.concurrency_limit,
            fairness_key=fair,
            fair=self.fairness_key is not None,
        )


@dataclass(frozen=True)
class DeliveryLimits:
    """The limits that apply to one delivery of a job."""

    rate_name: str | None = None
    interval_ms: int = 0
    #: the slot (Redis milliseconds) an earlier delivery of this message reserved
    reserved_ms: int | None = None
    key: str | None = None
    limit: int = 1
    #: the job's fairness key (None: none, or its task is not fair)
    fairness_key: str | None = None
    #: its task hands its key's freed slots round-robin by fairness key
    fair: bool = False


def limits_of(options: Mapping[str, Any]) -> Limits:
    """The limits ``options`` declare (``rate_limit_global``, ``concurrency_key``,
    ``concurrency_limit``, ``fairness_key``; None: not declared), checked.

    Raises:
        InvalidTaskOption: names the option and what it must be.
    """
    rate = options.get("rate_limit_global")
    name, interval = _rate(rate) if rate is not None else (None, None)
    key = options.get("concurrency_key")
    if key is not None:
        check_template(key, "concurrency_key")
    limit = options.get("concurrency_limit")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidTaskOption(
                "concurrency_limit", f"must be a positive integer, got {limit!r}"
            )
        if key is None:
            raise InvalidTaskOption(
                "concurrency_limit", "needs a concurrency_key (the jobs it limits)"
            )
    fair = options.get("fairness_key")
    if fair is not None:
        check_template(fair, "fairness_key")
        if key is None:
            raise InvalidTaskOption(
                "fairness_key", "needs a concurrency_key (the jobs that take turns by it)"
            )
    return Limits(name, interval, key, limit, fair)


def _rate(value: Any) -> tuple[str, int | None]:
    name, interval = (value, None) if isinstance(value, str) else (None, None)
    if isinstance(value, tuple | list) and len(value) == 2:
        name, interval = value
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise InvalidTaskOption(
                "rate_limit_global",
                f"the interval must be a positive integer of milliseconds, got {interval!r}",
            )
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_LIMITER_NAME:
        raise InvalidTaskOption(
            "rate_limit_global",
            f"must be a limiter name (1-200 characters) or (name, interval_ms), got {value!r}",
        )
    return name, interval


def concurrency_key(
    template: str | Callable[..., str], named: Mapping[str, Any], args: Any, kwargs: Any
) -> str:
    """The call's concurrency key from the task's template (over ``named``, the call's
    arguments by name) or callable (called with the arguments).

    Raises:
        InvalidPayload: the arguments cannot make a key of 1-255 characters.
    """
    return KeyCall("", args, kwargs, named).build("concurrency_key", template)  # calls.py


def _header(request: Any, name: str) -> Any:
    """A custom header of a delivery (Celery also makes them attributes of the request)."""
    value = (getattr(request, "headers", None) or {}).get(name)
    return getattr(request, name, None) if value is None else value


def slot_header(name: str, slot_ms: int) -> dict[str, str]:
    """The header telling the next delivery which slot it reserved."""
    return {HEADER_RATE_SLOT: f"{name}@{int(slot_ms)}"}


def reserved_slot(value: Any, name: str | None) -> int | None:
    """The slot reserved on limiter ``name`` by an earlier delivery of this message
    (``value``: its ``tracked_rate_slot`` header)."""
    if name is None or not isinstance(value, str) or "@" not in value:
        return None
    owner, _, slot = value.rpartition("@")
    try:
        return int(slot) if owner == name else None
    except ValueError:
        return None


@dataclass(frozen=True)
class LimiterState:
    """One limiter (milliseconds of its one clock): the next free slot to hand out, the
    latest start it granted (both None: no state, never used or lost); the slot of a
    delivery refused its start after its claim, owed the next start until ``owed_until_ms``;
    the slot of the delivery now between its check and its grant (claiming its job), whose
    turn it is until ``hold_until_ms``."""

    next_ms: float | None = None
    last_ms: float | None = None
    owed_ms: float | None = None
    owed_until_ms: float | None = None
    hold_ms: float | None = None
    hold_until_ms: float | None = None

    @property
    def empty(self) -> bool:
        return self.next_ms is None and self.last_ms is None

    def owed(self, now_ms: float) -> float | None:
        """The slot owed the next start, while it is."""
        if self.owed_ms is None or self.owed_until_ms is None or now_ms >= self.owed_until_ms:
            return None
        return self.owed_ms

    def held(self, now_ms: float, slot_ms: float) -> float | None:
        """Until when another slot holds the turn (claiming its job), if one does."""
        until = self.hold_until_ms
        if self.hold_ms is None or until is None or now_ms >= until or self.hold_ms == slot_ms:
            return None
        return until


def recovered(state: LimiterState, now_ms: float, interval_ms: int) -> LimiterState:
    """The state a limiter works from: an empty one (first use, or a Redis that lost it:
    the two cannot be told apart) is taken as a start granted ``now_ms``, so no body starts
    within ``interval_ms`` of one granted before the loss."""
    return LimiterState(now_ms + interval_ms, now_ms) if state.empty else state


def release_slot(state: LimiterState, slot_ms: float) -> LimiterState:
    """The state once the delivery of ``slot_ms`` runs nothing after all (its message was
    replaced by a rescue, its job ended or is gone): the turn it held while claiming, and
    the next start owed to it, are given back at once instead of lapsing one interval or
    two later."""
    if state.hold_ms == slot_ms:
        state = replace(state, hold_ms=None, hold_until_ms=None)
    if state.owed_ms == slot_ms:
        state = replace(state, owed_ms=None, owed_until_ms=None)
    return state


def take_slot(
    state: LimiterState, now_ms: float, interval_ms: int, reserved_ms: float | None
) -> tuple[int, int, LimiterState]:
    """``(wait_ms, slot_ms, new state)`` for a delivery at ``now_ms``, before its claim.

    A delivery without a reserved slot reserves the next one (slots are ``interval_ms``
    apart, first come first served). It may go on to claim once its slot has come, the
    latest granted start is ``interval_ms`` behind, no older slot is owed the next start and
    no other delivery holds the turn: then ``wait_ms`` is 0, and it holds the turn for
    ``interval_ms`` (its claim, then its grant). Otherwise it waits ``wait_ms`` (rounded up)
    and keeps its slot. No start is recorded here: that is :func:`grant_start`, after the
    claim. The Lua script of ``limiter.py`` is this function (after :func:`recovered`).
    """
    next_ms = state.next_ms if state.next_ms is not None else now_ms
    if reserved_ms is None:
        reserved_ms = max(now_ms, next_ms)
        next_ms = reserved_ms + interval_ms
    at = reserved_ms
    if state.last_ms is not None:
        at = max(at, state.last_ms + interval_ms)
    owed, slot = state.owed(now_ms), math.ceil(reserved_ms)
    if owed is not None and owed < reserved_ms and state.owed_until_ms is not None:
        at = max(at, state.owed_until_ms)  # the owed start first, then this one
    held = state.held(now_ms, slot)
    if held is not None:
        at = max(at, held)  # another delivery is claiming its job
    if at > now_ms:
        return math.ceil(at - now_ms), slot, replace(state, next_ms=next_ms)
    return (
        0,
        slot,
        replace(state, next_ms=next_ms, hold_ms=slot, hold_until_ms=now_ms + interval_ms),
    )


def grant_start(
    state: LimiterState, now_ms: float, interval_ms: int, slot_ms: float | None
) -> tuple[int, LimiterState]:
    """``(wait_ms, new state)`` for a delivery (of slot ``slot_ms``) that claimed its job
    and would start its body now: 0 when no start was granted within ``interval_ms`` and no
    older slot is owed the next one (this start is then recorded), else the milliseconds
    until one may be. The grant and the body's start are one decision: nothing slow comes
    between them. A refused delivery gives its claim back; the next start is owed to it
    (the oldest refused slot) for one interval after it may come back, so the deliveries of
    later slots do not overtake it. The Lua script of ``limiter.py`` is this function."""
    slot = math.inf if slot_ms is None else slot_ms
    if state.hold_ms is not None and state.hold_ms == slot_ms:  # its turn ends here
        state = replace(state, hold_ms=None, hold_until_ms=None)
    owed, last = state.owed(now_ms), state.last_ms
    if owed is not None and owed < slot and state.owed_until_ms is not None:
        return math.ceil(state.owed_until_ms - now_ms), state  # an older slot goes first
    if last is not None and last + interval_ms > now_ms:
        if slot_ms is not None and (owed is None or slot_ms <= owed):
            state = replace(state, owed_ms=slot_ms, owed_until_ms=last + 2 * interval_ms)
        return math.ceil(last + interval_ms - now_ms), state
    granted = started(state, now_ms, interval_ms)
    if owed is not None and owed > slot:  # a younger refused slot is still owed
        return 0, granted
    return 0, replace(granted, owed_ms=None, owed_until_ms=None)


def started(state: LimiterState, now_ms: float, interval_ms: int) -> LimiterState:
    """The state once a start at ``now_ms`` is recorded: no later start, and no new slot,
    within ``interval_ms`` of it."""
    last = now_ms if state.last_ms is None else max(state.last_ms, now_ms)
    next_ms = now_ms + interval_ms if state.next_ms is None else state.next_ms
    return replace(state, next_ms=max(next_ms, last + interval_ms), last_ms=last)


#: How often, together, the deliveries waiting on one full concurrency key look for a
#: free slot (per second), however many they are: a freed slot is handed on at once
#: (``services/handoff.py``), these looks only find a slot no hand-off took.
BUSY_KEY_LOOKS_PER_S = 4.0
#: The longest a waiting delivery stays away (with hundreds of jobs waiting on one key),
#: unless the reaper's thresholds are shorter (``longest``: the runner's, three quarters
#: of the smaller one, so a waiting job never looks stalled).
BUSY_KEY_MAX_WAIT_S = 240.0


def busy_key_countdown(
    fraction: float, waiting: int = 1, longest: float = BUSY_KEY_MAX_WAIT_S
) -> float:
    """Seconds until a delivery whose concurrency key is full looks again, ``waiting``
    jobs of the key waiting with it (``fraction`` in [0, 1): a random jitter, so they do
    not come back together).

    Each waits about ``waiting / BUSY_KEY_LOOKS_PER_S`` seconds, at least 0.5 s (up to 2
    waiting, as when each looked twice a second): beyond that the key's waiting
    deliveries together come back about 4 times a second whether 3 or 1,000 wait, so the
    broker's traffic stops growing with the line behind a key. A freed slot does not wait
    for these looks: the run that frees it hands it to the key's next due waiting job
    (``services/handoff.py``); a look finds a slot no hand-off took (none could, or it
    failed) within about 250 ms. Beyond ``longest`` seconds (about 1,000 waiting with the
    default thresholds) each still looks once per ``longest``."""
    mean = max(0.5, waiting / BUSY_KEY_LOOKS_PER_S)
    return min(longest, BUSY_KEY_MAX_WAIT_S, mean * (0.5 + fraction))
