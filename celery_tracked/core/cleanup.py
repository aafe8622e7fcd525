"""The cleanup's rules, pure: how long ended jobs are kept (their retention), and which
rows a cleanup removes.

The app's settings give the default ages (``tracked_retention_completed_days``,
``tracked_retention_failed_days`` for ``failed`` and ``cancelled``); a task may override
them with ``retention=`` (checked at decoration by :func:`task_retention`):

- a duration for every ended status: ``retention=timedelta(days=3)`` or ``retention=3``
  (days, a number);
- or per status: ``retention={"completed": 1, "failed": timedelta(days=90)}``, keys among
  ``"completed"``, ``"failed"``, ``"cancelled"``; ``None`` keeps that status forever; a
  status not named keeps the app's default.

A cleanup removes a row when its status is ended, its ``finished_at`` is older than the
age that applies to its task and status, and, with ``tracked_retention_keep_newest = K``,
it is not among the K newest rows of its queue and status. :func:`sweeps` turns that into
a few :class:`Sweep` conditions the store runs in batches; :meth:`Sweep.admits` states the
same condition for one row. ``pending``, ``processing`` and ``retrying`` rows are never
part of a sweep. No SQL, Redis or Celery here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .errors import InvalidTaskOption

#: The statuses a cleanup may remove, in the order it sweeps them.
ENDED = ("completed", "failed", "cancelled")
#: The longest retention accepted (older dates cannot be computed).
MAX_DAYS = 36_500.0


def days(value: Any, what: str) -> timedelta:
    """``value`` (a ``timedelta``, or a number of days) as a ``timedelta``.

    Raises:
        ValueError: not a finite, non-negative duration of at most :data:`MAX_DAYS` days
            (the message says so, naming ``what``).
    """
    if isinstance(value, timedelta):
        number = value.total_seconds() / 86_400
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        raise ValueError(f"{what} must be a timedelta or a number of days, got {value!r}")
    if not math.isfinite(number) or not 0 <= number <= MAX_DAYS:
        raise ValueError(f"{what} must be between 0 and {MAX_DAYS:.0f} days, got {value!r}")
    return value if isinstance(value, timedelta) else timedelta(days=number)


@dataclass(frozen=True)
class TaskRetention:
    """One task's overrides: per ended status, its age (None: kept forever). A status
    absent from ``ages`` keeps the app's default."""

    ages: tuple[tuple[str, timedelta | None], ...]

    def get(self, status: str) -> tuple[bool, timedelta | None]:
        """``(overridden, age)`` for ``status``."""
        for name, age in self.ages:
            if name == status:
                return True, age
        return False, None


def task_retention(value: Any) -> TaskRetention | None:
    """A task's ``retention=`` option, checked (None: the app's defaults).

    Raises:
        InvalidTaskOption: not a duration, a number of days, or a mapping of ended
            statuses to those (or None); a negative or unbounded duration.
    """
    if value is None:
        return None
    try:
        if isinstance(value, Mapping):
            return TaskRetention(tuple(_status_age(k, v) for k, v in value.items()))
        age = days(value, "retention")
    except ValueError as exc:
        raise InvalidTaskOption("retention", str(exc).removeprefix("retention ")) from None
    return TaskRetention(tuple((status, age) for status in ENDED))


def _status_age(status: Any, value: Any) -> tuple[str, timedelta | None]:
    if status not in ENDED:
        names = ", ".join(repr(s) for s in ENDED)
        raise ValueError(f"retention keys must be among {names}, got {status!r}")
    return status, None if value is None else days(value, f"retention[{status!r}]")


@dataclass(frozen=True)
class Policy:
    """What a cleanup keeps: the default age per ended status, the tasks' overrides (by
    task name) and how many newest rows per queue and status are kept whatever their age."""

    defaults: Mapping[str, timedelta]
    per_task: Mapping[str, TaskRetention] = field(default_factory=dict)
    keep_newest: int = 0


def policy_of(
    completed: timedelta, failed: timedelta, tasks: Iterable[tuple[str, Any]], keep_newest: int
) -> Policy:
    """The policy of an app: its settings' ages (``failed`` also for ``cancelled``) and the
    ``retention`` option of each ``(task name, retention)`` of ``tasks`` (None: none)."""
    per_task = {}
    for name, value in tasks:
        parsed = task_retention(value)
        if parsed is not None:
            per_task[name] = parsed
    defaults = {"completed": completed, "failed": failed, "cancelled": failed}
    return Policy(defaults, per_task, keep_newest)


@dataclass(frozen=True)
class Boundary:
    """The K-th newest row of a queue in one status (``tracked_retention_keep_newest``):
    the rows ordered before it (by ``finished_at``, then ``id``) are beyond the newest K."""

    queue: str
    finished_at: datetime
    id: str


@dataclass(frozen=True)
class Sweep:
    """Rows of ``status`` finished before ``before``; of the tasks ``tasks`` only (when
    given), else of every task but ``other_than``; and, when ``below`` is not None, only
    in the queues it names, older than their :class:`Boundary` (keep-newest)."""

    status: str
    before: datetime
    tasks: tuple[str, ...] = ()
    other_than: tuple[str, ...] = ()
    below: tuple[Boundary, ...] | None = None

    def admits(
        self, status: str, task_name: str, queue: str, finished_at: datetime | None, id: str
    ) -> bool:
        """Whether this sweep removes a row with these values (the store's condition)."""
        if status != self.status or finished_at is None or finished_at >= self.before:
            return False
        if self.tasks and task_name not in self.tasks:
            return False
        if task_name in self.other_than:
            return False
        if self.below is None:
            return True
        return any(
            b.queue == queue and (finished_at, id) < (b.finished_at, b.id) for b in self.below
        )


def sweeps(
    policy: Policy, now: datetime, boundaries: Iterable[tuple[str, Boundary]] = ()
) -> list[Sweep]:
    """The sweeps that remove what ``policy`` no longer keeps at ``now``.

    Per ended status: one for every task without an override of that status, one per
    distinct overridden age (a task keeping the status forever gets none).
    ``boundaries``: ``(status, Boundary)`` of every queue holding at least
    ``keep_newest`` rows of that status (only read when ``keep_newest`` > 0): a status
    without any has nothing to remove.
    """
    below: dict[str, list[Boundary]] = {s: [] for s in ENDED}
    for status, boundary in boundaries:
        below[status].append(boundary)
    out: list[Sweep] = []
    for status in ENDED:
        kept = tuple(below[status]) if policy.keep_newest else None
        if kept == ():
            continue
        default = policy.defaults[status]
        by_age: dict[timedelta | None, list[str]] = {}
        for name, retention in sorted(policy.per_task.items()):
            overridden, age = retention.get(status)
            if overridden and age != default:
                by_age.setdefault(age, []).append(name)
        others = tuple(name for names in by_age.values() for name in names)
        out.append(Sweep(status, now - default, other_than=tuple(sorted(others)), below=kept))
        for age, names in by_age.items():
            if age is not None:
                out.append(Sweep(status, now - age, tasks=tuple(names), below=kept))
    return out
