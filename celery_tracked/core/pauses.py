"""Pauses, pure: what is paused (a queue, a job type, everything), and whether a delivery
of a queue and job type is held by one of them.

A pause is one row of ``background_job_pauses`` (``scope``, ``name``, who, when on the
database's clock, why); resuming deletes it. ``Tracker.pause``/``resume``/``paused`` and
the worker's gate are ``services/pauses.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from .errors import InvalidPause

QUEUE, JOB_TYPE, ALL = "queue", "job_type", "all"
SCOPES = (QUEUE, JOB_TYPE, ALL)
#: The name of the ``all`` scope's one row.
EVERYTHING = "*"
#: ``locked_by`` of a waiting row a pause holds in the database (no message, no lease):
#: the relay publishes it once no pause covers it (``store/statements.py``).
HELD_BY_PAUSE = "paused"
_LONGEST_NAME = 255
_LONGEST_REASON = 2000


@dataclass(frozen=True)
class Pause:
    """One pause: ``scope`` (``queue``, ``job_type``, ``all``), ``name`` (``*`` for
    ``all``), who paused it, when (the database's clock) and why."""

    scope: str
    name: str
    paused_by: str | None
    paused_at: datetime
    reason: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Pause:
        return cls(row["scope"], row["name"], row["paused_by"], row["paused_at"], row["reason"])

    def covers(self, queue: str, job_type: str) -> bool:
        """It holds deliveries of ``queue`` and ``job_type``."""
        if self.scope == ALL:
            return True
        return self.name == (queue if self.scope == QUEUE else job_type)

    def describe(self) -> str:
        """``queue 'emails' paused by ops@host since ...: why``."""
        what = (
            "everything" if self.scope == ALL else f"{self.scope.replace('_', ' ')} {self.name!r}"
        )
        why = f": {self.reason}" if self.reason else ""
        return f"{what} paused by {self.paused_by or '?'} since {self.paused_at.isoformat()}{why}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "name": self.name,
            "paused_by": self.paused_by,
            "paused_at": self.paused_at.isoformat(),
            "reason": self.reason,
        }


def holding(pauses: Iterable[Pause], queue: str, job_type: str) -> Pause | None:
    """The first of ``pauses`` that holds a delivery of ``queue`` and ``job_type``."""
    for pause in pauses:
        if pause.covers(queue, job_type):
            return pause
    return None


def scope_of(
    queue: str | None, job_type: str | None, everything: bool, action: str = "pause"
) -> tuple[str, str]:
    """``(scope, name)`` of ``pause``/``resume``'s keywords (``action``): exactly one of them.

    Raises:
        InvalidPause: none or several given, or a name that is not text a row can hold;
            the message says what was given and what is allowed.
    """
    given = [(QUEUE, queue), (JOB_TYPE, job_type)]
    chosen = [(scope, name) for scope, name in given if name is not None]
    if everything is not False and everything is not True:
        raise InvalidPause(
            f"{action}: everything must be True or False, not {type(everything).__name__} "
            f"{everything!r}"
        )
    if everything:
        chosen.append((ALL, EVERYTHING))
    if len(chosen) != 1:
        got = " and ".join(f"{s}=True" if s == ALL else f"{s}={n!r}" for s, n in chosen) or "none"
        raise InvalidPause(
            f"{action} takes exactly one scope, got {got}: give queue='NAME', "
            f"job_type='NAME' or everything=True ({action} each one by its own call)"
        )
    scope, name = chosen[0]
    if not isinstance(name, str) or not name.strip() or len(name) > _LONGEST_NAME:
        raise InvalidPause(
            f"{action}: the {scope.replace('_', ' ')} must be a name of 1 to "
            f"{_LONGEST_NAME} characters (not only spaces), got {_shown(name)}"
        )
    return scope, name


def _shown(name: object) -> str:
    """A refused name as the error shows it: a long one by its length."""
    if isinstance(name, str) and len(name) > _LONGEST_NAME:
        return f"{len(name)} characters"
    return repr(name) if isinstance(name, str) else f"a {type(name).__name__}"


def check_note(value: str | None, what: str, longest: int = _LONGEST_REASON) -> str | None:
    """``reason``/``by``: None, or text of at most ``longest`` characters.

    Raises:
        InvalidPause: anything else (the message says what was given).
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidPause(
            f"{what} must be text (or None) of at most {longest} characters, "
            f"got a {type(value).__name__}"
        )
    if len(value) > longest:
        raise InvalidPause(
            f"{what} must be at most {longest} characters, got {len(value)}: shorten it"
        )
    return value


class PauseStore(Protocol):
    """What is paused: one row per paused queue, job type, or everything."""

    def pause(self, scope: str, name: str, *, by: str | None, reason: str | None) -> bool:
        """Record the pause (``paused_at``: the database's clock); False if that scope and
        name were paused already (the first pause's row is kept)."""

    def resume(self, scope: str, name: str) -> bool:
        """Delete the pause; False if there was none."""

    def pauses(self) -> list[Pause]:
        """Every pause in force, oldest first."""
