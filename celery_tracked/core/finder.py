"""Finding jobs: the filters of ``Tracker.jobs`` and of the bulk actions, the keyset
cursor, a page of jobs, and what a bulk action did. Pure: no database, no Celery.

Jobs are listed newest first, ordered by ``(created_at, id)`` descending: a total order,
so a page never repeats or skips a row, however many jobs are created or change status
meanwhile. A page's ``next_cursor`` is the position of its last job (an opaque token);
the next page starts strictly after it. Filters (all optional, combined with AND):

- ``status``: one status or several (any of them);
- ``queue``, ``job_type``, ``task_name``, ``correlation_id``, ``owner_id``,
  ``error_type``, ``tenant``: equal to the value given;
- ``priority``: the job's priority (an int 0-255; jobs without one never match);
- ``created_after``/``created_before``, ``finished_after``/``finished_before``: an aware
  ``datetime``, or a ``timedelta`` meaning that long before now; ``*_after`` is inclusive,
  ``*_before`` exclusive;
- ``due_after``/``due_before``: the job's due time (``not_before``), a ``timedelta``
  meaning that long from now.
"""

from __future__ import annotations

import base64
import binascii
import difflib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta, timezone
from typing import Any, TypedDict

from . import validation
from .errors import InvalidFilter
from .jobs import Job, JobStatus, utcnow

#: ``Tracker.jobs``: jobs per page by default, and at most.
DEFAULT_PAGE = 50
MAX_PAGE = 1000
#: The longest text filter (the widest of the filtered columns).
MAX_TEXT = 255
_CURSOR_VERSION = "1"

#: A status filter: one status (a ``JobStatus`` or its value) or several.
Statuses = str | JobStatus | Iterable[str | JobStatus] | None
#: A range bound: an aware datetime, or how long before now.
Bound = datetime | timedelta | None


class Filters(TypedDict, total=False):
    """The filter keywords of ``Tracker.jobs``, ``retry_many`` and ``cancel_many``."""

    status: Statuses
    queue: str | None
    job_type: str | None
    task_name: str | None
    correlation_id: str | None
    owner_id: str | None
    error_type: str | None
    tenant: str | None
    priority: int | None
    created_after: Bound
    created_before: Bound
    finished_after: Bound
    finished_before: Bound
    due_after: Bound
    due_before: Bound


_TEXT_FIELDS = (
    *("queue", "job_type", "task_name", "correlation_id", "owner_id", "error_type", "tenant"),
)
_RANGES = (
    ("created_after", "created_before"),
    ("finished_after", "finished_before"),
    ("due_after", "due_before"),
)


@dataclass(frozen=True)
class JobFilter:
    """Which jobs: every field left None (or ``statuses`` empty) matches all of them.

    Build it with :meth:`of` (which accepts the friendly forms: a status name, a list, a
    ``timedelta``); the constructor checks every value.

    Raises:
        InvalidFilter: a value of the wrong type, a naive datetime, an empty range.
    """

    statuses: tuple[JobStatus, ...] = ()
    queue: str | None = None
    job_type: str | None = None
    task_name: str | None = None
    correlation_id: str | None = None
    owner_id: str | None = None
    error_type: str | None = None
    tenant: str | None = None
    priority: int | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    #: the job's due time (``not_before``: a countdown/eta, a retry's backoff); a job
    #: without one never matches a due bound
    due_after: datetime | None = None
    due_before: datetime | None = None

    def __post_init__(self) -> None:
        for status in self.statuses:
            if not isinstance(status, JobStatus):
                raise InvalidFilter(f"status: {status!r} is not a JobStatus")
        for name in _TEXT_FIELDS:
            validation.check_filter_text(name, getattr(self, name), MAX_TEXT)
        wanted = self.priority
        if wanted is not None and (
            isinstance(wanted, bool) or not isinstance(wanted, int) or not 0 <= wanted <= 255
        ):
            raise InvalidFilter(f"priority: an int from 0 to 255, not {wanted!r}")
        for after, before in _RANGES:
            low, high = getattr(self, after), getattr(self, before)
            validation.check_time(after, low)
            validation.check_time(before, high)
            if low is not None and high is not None and low >= high:
                raise InvalidFilter(f"{after} ({low.isoformat()}) is not before {before}")

    @classmethod
    def of(
        cls,
        *,
        status: Statuses = None,
        queue: str | None = None,
        job_type: str | None = None,
        task_name: str | None = None,
        correlation_id: str | None = None,
        owner_id: str | None = None,
        error_type: str | None = None,
        tenant: str | None = None,
        priority: int | None = None,
        created_after: Bound = None,
        created_before: Bound = None,
        finished_after: Bound = None,
        finished_before: Bound = None,
        due_after: Bound = None,
        due_before: Bound = None,
        now: datetime | None = None,
    ) -> JobFilter:
        """The filter of ``Tracker.jobs``' keywords; a ``timedelta`` bound is taken back
        from ``now`` (default: this process's clock), but a due bound's is ahead of it
        (``due_before=timedelta(hours=1)``: due within the hour)."""
        now = now or utcnow()
        return cls(
            statuses=parse_statuses(status),
            queue=queue,
            job_type=job_type,
            task_name=task_name,
            correlation_id=correlation_id,
            owner_id=owner_id,
            error_type=error_type,
            tenant=tenant,
            priority=priority,
            created_after=_bound("created_after", created_after, now),
            created_before=_bound("created_before", created_before, now),
            finished_after=_bound("finished_after", finished_after, now),
            finished_before=_bound("finished_before", finished_before, now),
            due_after=_bound("due_after", due_after, now, ahead=True),
            due_before=_bound("due_before", due_before, now, ahead=True),
        )

    @property
    def empty(self) -> bool:
        """True when it matches every job."""
        return self == JobFilter()

    def as_dict(self) -> dict[str, Any]:
        """The filters set, as JSON-ready values (statuses by value, times ISO 8601)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value == ():
                continue
            if f.name == "statuses":
                out["status"] = [s.value for s in value]
            elif isinstance(value, datetime):
                out[f.name] = value.isoformat()
            else:
                out[f.name] = value
        return out

    def matches(self, job: Job) -> bool:
        """Whether ``job`` passes every filter (the store's conditions, in Python)."""
        if self.statuses and job.status not in self.statuses:
            return False
        for name in _TEXT_FIELDS:
            wanted = getattr(self, name)
            column = "queue_name" if name == "queue" else name
            if wanted is not None and getattr(job, column) != wanted:
                return False
        if self.priority is not None and job.priority != self.priority:
            return False
        values = (job.created_at, job.finished_at, job.not_before)
        for (after, before), value in zip(_RANGES, values, strict=True):
            low, high = getattr(self, after), getattr(self, before)
            if (low is not None or high is not None) and value is None:
                return False
            if (low is not None and value < low) or (high is not None and value >= high):
                return False
        return True

    def restricted_to(
        self,
        allowed: Sequence[JobStatus],
        action: str,
        default: Sequence[JobStatus] | None = None,
    ) -> JobFilter:
        """This filter for a bulk ``action`` that only acts on ``allowed`` statuses: no
        status given means ``default`` (all of them when None); a status outside them is
        refused."""
        if not self.statuses:
            return _replace(self, statuses=tuple(allowed if default is None else default))
        wrong = [s.value for s in self.statuses if s not in allowed]
        if wrong:
            names = ", ".join(s.value for s in allowed)
            raise InvalidFilter(
                f"{action} acts on {names} jobs only, not {', '.join(wrong)}: "
                "leave the status out, or name those statuses"
            )
        return self


def _replace(filt: JobFilter, **changes: Any) -> JobFilter:
    values = {f.name: getattr(filt, f.name) for f in fields(filt)}
    values.update(changes)
    return JobFilter(**values)


def parse_statuses(status: Statuses) -> tuple[JobStatus, ...]:
    """One status or several (names or ``JobStatus``), in order, without repeats.

    Raises:
        InvalidFilter: an unknown status, a value that is not a status at all, or an
            empty list.
    """
    if status is None:
        return ()
    items: Iterable[Any] = (status,) if isinstance(status, str | JobStatus) else status
    out: list[JobStatus] = []
    try:
        iterator = iter(items)
    except TypeError:
        raise InvalidFilter(f"status: {status!r} is neither a status nor a list") from None
    for item in iterator:
        if isinstance(item, JobStatus):
            parsed = item
        elif isinstance(item, str):
            try:
                parsed = JobStatus(item.strip().lower())
            except ValueError:
                known = ", ".join(s.value for s in JobStatus)
                raise InvalidFilter(f"status: {item!r} is not one of {known}") from None
        else:
            raise InvalidFilter(f"status: {item!r} is not a status")
        if parsed not in out:
            out.append(parsed)
    if not out:  # never "every status" by accident (a bulk action on an empty selection)
        raise InvalidFilter("status: an empty list; leave it out (None) for every status")
    return tuple(out)


def filter_of(filters: Filters, clock: Callable[[], datetime]) -> JobFilter:
    """``JobFilter.of(**filters)``, a ``timedelta`` bound taken back from ``clock()`` (the
    database's: ``created_at``/``finished_at`` are judged on it), read only then.

    Raises:
        InvalidFilter: an unknown keyword (``task=`` for ``task_name=``), or a bad value.
    """
    for name in filters:
        if name not in Filters.__annotations__:
            near = difflib.get_close_matches(str(name), list(Filters.__annotations__), 1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            known = ", ".join(Filters.__annotations__)
            raise InvalidFilter(f"unknown filter {name!r}{hint}; the filters: {known}")
    relative = any(isinstance(value, timedelta) for value in filters.values())
    return JobFilter.of(**filters, now=clock() if relative else None)


def _bound(name: str, value: Bound, now: datetime, ahead: bool = False) -> datetime | None:
    if isinstance(value, timedelta):
        if value < timedelta(0):
            what = "from now" if ahead else "ago"
            raise InvalidFilter(f"{name}: a timedelta means 'that long {what}': not negative")
        try:
            return now + value if ahead else max(now - value, EARLIEST)
        except OverflowError:
            limit = "ahead is past the year 9999" if ahead else "ago is before the year 1"
            raise InvalidFilter(f"{name}: {value.days} days {limit} (no date to compare)") from None
    validation.check_time(name, value)
    return None if value is None else max(value.astimezone(timezone.utc), EARLIEST)


#: The earliest instant every store compares with (MariaDB's DATETIME starts in the year
#: 1000): an older bound selects the same jobs as this one (none is older).
EARLIEST = datetime(1000, 1, 1, tzinfo=timezone.utc)


def check_limit(limit: Any, maximum: int | None = MAX_PAGE, name: str = "limit") -> int:
    """A page size or a bulk action's limit: an int from 1 to ``maximum``
    (:func:`celery_tracked.validation.check_limit`)."""
    return validation.check_limit(limit, maximum, name)


# -- the cursor -------------------------------------------------------------------------


@dataclass(frozen=True)
class Position:
    """Where a page ended: its last job's ``(created_at, id)``."""

    created_at: datetime
    id: str

    @classmethod
    def of(cls, job: Job) -> Position:
        return cls(job.created_at.astimezone(timezone.utc), job.id)


def encode_cursor(position: Position) -> str:
    """An opaque, URL-safe token for ``position``."""
    text = f"{_CURSOR_VERSION}|{position.created_at.isoformat()}|{position.id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(token: Any) -> Position:
    """The position ``token`` (a ``next_cursor``) stands for.

    Raises:
        InvalidFilter: the token is not one :func:`encode_cursor` made.
    """
    bad = InvalidFilter("cursor: not a cursor of this listing (pass a page's next_cursor)")
    if not isinstance(token, str) or not token or len(token) > 200:
        raise bad
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        version, stamp, job_id = text.split("|")
        created = datetime.fromisoformat(stamp)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise bad from None
    if version != _CURSOR_VERSION or created.tzinfo is None or not job_id:
        raise bad
    return Position(created, job_id)


# -- results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class JobPage:
    """One page of ``Tracker.jobs``: its jobs (newest first) and the cursor of the next
    page (None: this was the last one)."""

    jobs: tuple[Job, ...]
    next_cursor: str | None

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)


def page_of(rows: Sequence[Job], limit: int) -> JobPage:
    """The page of ``rows`` (read with ``limit + 1``: one more tells a next page exists)."""
    if len(rows) <= limit:
        return JobPage(tuple(rows), None)
    shown = tuple(rows[:limit])
    return JobPage(shown, encode_cursor(Position.of(shown[-1])))
