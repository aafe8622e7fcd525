"""Idempotency key lifetimes: what a new enqueue does when its key already has a job.

A task chooses one lifetime (``key_lifetime=``, checked at decoration):

``"row"`` (the default, seed 000)
    one job per key while its row exists: every later enqueue returns that job, whatever
    its status; running a ``failed``/``cancelled`` one again is ``Tracker.retry``.
``"ended"`` (celery-once, celery-singleton)
    one job per key at a time: once the key's job has ended (``completed``, ``failed``,
    ``cancelled``) the next enqueue creates a new job.
``"throttle"`` (``throttle_s=`` seconds)
    at most one job per key per window: the next enqueue creates a new job once
    ``throttle_s`` seconds have passed since the key's job was created, whatever its status.
``"debounce"`` (optional ``debounce_s=`` seconds)
    while the key's job is still ``pending``, a new enqueue replaces its arguments (and,
    with ``debounce_s``, every enqueue pushes its start to ``debounce_s`` seconds later);
    once it runs, later enqueues return it; once it ended, the next one creates a new job.

The jobs that held one key in turn are rounds 0, 1, 2... of it (``key_round``); the
database's unique ``(job_type, idempotency_key, key_round)`` lets one producer only
create each round. Pure: no Redis, SQL or Celery here.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .errors import InvalidTaskOption
from .jobs import Job, JobStatus
from .validation import window_seconds


class KeyLifetime(str, enum.Enum):
    """How long an idempotency key keeps new jobs out (see the module's text)."""

    ROW = "row"
    ENDED = "ended"
    THROTTLE = "throttle"
    DEBOUNCE = "debounce"


class Then(enum.Enum):
    """What an enqueue does with the key's latest job."""

    #: return it (``created=False``)
    DUPLICATE = "duplicate"
    #: create the key's next round
    NEW_ROUND = "new_round"
    #: replace its arguments (debounce): the same job, a new message
    REPLACE = "replace"


@dataclass(frozen=True)
class KeyRule:
    """A task's key lifetime and its durations (seconds)."""

    lifetime: KeyLifetime = KeyLifetime.ROW
    throttle_s: float | None = None
    debounce_s: float | None = None

    @property
    def reused(self) -> bool:
        """A key may have more than one job (rounds) under this rule."""
        return self.lifetime is not KeyLifetime.ROW

    @property
    def timed(self) -> bool:
        """Deciding under this rule compares times (a throttle's window), so its ``now``
        and its rows' ``created_at`` must be the database's clock; the other lifetimes
        decide on statuses alone."""
        return self.lifetime is KeyLifetime.THROTTLE

    def guard_ttl_ms(self, default_ms: int) -> int:
        """How long the Redis guard may answer for the key without the database: the
        window for a throttle (then the key is free anyway), else ``default_ms``."""
        if self.lifetime is KeyLifetime.THROTTLE and self.throttle_s is not None:
            return max(1, min(default_ms, int(self.throttle_s * 1000)))
        return default_ms


def then(rule: KeyRule, latest: Job, now: datetime) -> Then:
    """What a new enqueue does when ``latest`` is the key's newest job, at ``now`` (the
    database's clock, as a throttled row's ``created_at`` is: :attr:`KeyRule.timed`)."""
    lifetime = rule.lifetime
    if lifetime is KeyLifetime.ROW:
        return Then.DUPLICATE
    if lifetime is KeyLifetime.THROTTLE:
        window = timedelta(seconds=rule.throttle_s or 0.0)
        return Then.NEW_ROUND if now >= latest.created_at + window else Then.DUPLICATE
    if latest.terminal:
        return Then.NEW_ROUND
    if lifetime is KeyLifetime.DEBOUNCE and latest.status is JobStatus.PENDING:
        return Then.REPLACE
    return Then.DUPLICATE


@dataclass(frozen=True)
class UndoneReplace:
    """How the row of a debounce replacement whose message could not be published is
    left (:func:`undo_replace`): its previous arguments at a revision newer than every
    message sent for it, with no message handed over (``published_at`` empty)."""

    revision: int
    payload_json: str | None
    #: the sealed values of those arguments (``sealing.py``)
    secrets_sealed: str | None = None


def undo_replace(previous: Job, made: int) -> UndoneReplace:
    """The undo of a debounce replacement that made revision ``made`` of ``previous``
    (the row as the replacement read it) and whose publish failed.

    The row's message states, each a revision's message being *queued*, *consumed* (run, or
    skipped as stale) or *unknown* (a publish that raised may still have reached the broker):

    - while the row held revision ``made``, a delivery of the previous message (revision
      ``made - 1``) may have come, been skipped as stale and acknowledged: giving the row
      that revision back could leave a ``pending`` job whose only message is consumed, and
      marked handed over, so the relay would never look at it. The undo therefore never
      goes back to an older revision;
    - the replacement's own message (revision ``made``) is unknown: the undo must not let it
      run with the arguments given back either.

    So the previous arguments get revision ``made + 1``, newer than both, and no message:
    whichever of the two is delivered runs nothing, and the relay publishes the row after
    ``tracked_relay_grace_seconds`` (one message of the current revision). The store applies
    it only while nobody handed revision ``made`` over (not even a relay): else that message
    runs, with the new arguments, and the undo changes nothing.
    """
    return UndoneReplace(made + 1, previous.payload_json, previous.secrets_sealed)


#: The tracked options that make a task's key rule.
KEY_OPTIONS = ("key_lifetime", "throttle_s", "debounce_s")


def key_rule(options: Mapping[str, Any]) -> KeyRule:
    """The key rule ``options`` declare (``key_lifetime``, ``throttle_s``, ``debounce_s``;
    None: the default), checked.

    Raises:
        InvalidTaskOption: an unknown lifetime, a duration that is not a finite number of
            seconds, ``throttle`` without ``throttle_s``, or a duration for another lifetime.
    """
    raw = options.get("key_lifetime")
    try:
        lifetime = KeyLifetime(raw) if raw is not None else KeyLifetime.ROW
    except ValueError:
        names = ", ".join(repr(k.value) for k in KeyLifetime)
        raise InvalidTaskOption("key_lifetime", f"must be one of {names}, got {raw!r}") from None
    throttle_s = _seconds(options, "throttle_s", lifetime, KeyLifetime.THROTTLE, positive=True)
    debounce_s = _seconds(options, "debounce_s", lifetime, KeyLifetime.DEBOUNCE, positive=False)
    if lifetime is KeyLifetime.THROTTLE and throttle_s is None:
        raise InvalidTaskOption(
            "throttle_s", "is required with key_lifetime='throttle' (the window, in seconds)"
        )
    return KeyRule(lifetime, throttle_s, debounce_s)


def _seconds(
    options: Mapping[str, Any], name: str, lifetime: KeyLifetime, owner: KeyLifetime, positive: bool
) -> float | None:
    value = options.get(name)
    if value is None:
        return None
    if lifetime is not owner:
        raise InvalidTaskOption(
            name,
            f"only applies to key_lifetime={owner.value!r} (this task's is {lifetime.value!r})",
        )
    return window_seconds(name, value, positive)
