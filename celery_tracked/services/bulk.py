"""Acting on many jobs: ``Tracker.retry_many`` and ``Tracker.cancel_many``.

The jobs matching the filters are walked newest first (``Tracker.jobs``' order and
keyset, a page at a time, at most ``limit`` of them), and each goes through the same
fenced move as one job: ``Tracker.retry`` (failed | cancelled → pending, its message sent
again) or ``Tracker.cancel`` (pending | retrying → cancelled; with ``running=True`` a
running job is asked to stop). Nothing is decided from the listing: a job that moved
meanwhile is refused by its move's condition, and the report says why, job by job.

Which statuses each acts on: ``retry_many`` failed jobs (or the statuses given among
failed and cancelled); ``cancel_many`` pending and retrying jobs (plus processing ones
with ``running=True``). A status filter outside those is refused (``InvalidFilter``)
before anything is read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ..core.bulk import BulkReport
from ..core.errors import EnqueueError, InvalidPayload, JobNotFound, RetryRefused, StoreError
from ..core.finder import JobFilter, Position
from ..core.jobs import Job, JobStatus

#: Jobs read per page while acting.
PAGE = 200
#: ``limit`` of a bulk action by default.
DEFAULT_LIMIT = 1000

RETRIABLE = (JobStatus.FAILED, JobStatus.CANCELLED)
CANCELLABLE = (JobStatus.PENDING, JobStatus.RETRYING)

#: ``find(filter, after, limit)``: the store's listing (``Queries.find``).
Find = Callable[[JobFilter, "Position | None", int], Sequence[Job]]
#: ``one(job)``: act on one job; None when it moved, else why not (a :class:`Skip`: on
#: purpose).
One = Callable[[Job], "str | None"]


class Skip(str):
    """Why ``one`` left a job alone on purpose (reported as skipped, not refused)."""


#: Why a bulk retry leaves a failure that no retry was meant for.
UNRECOVERABLE = Skip(
    "stopped by an error that is not retried (Unrecoverable, or not in its task's "
    "autoretry_for): skipped, include it on purpose to retry it"
)


#: the ``error_type`` of a job the reaper gave up on (not its body's error)
ABANDONED = "abandoned"


def unrecoverable(job: Job) -> bool:
    """A ``failed`` job that stopped before using up its retries by its body's error: one
    not to be retried (``Unrecoverable``, or one its task does not retry)."""
    return (
        job.status is JobStatus.FAILED and not job.retries_exhausted and job.error_type != ABANDONED
    )


class Mover(Protocol):
    """The one-job moves a bulk action repeats (``Tracker``'s)."""

    def retry(self, job_id: str) -> bool: ...

    def cancel(self, job_id: str, reason: str = ..., *, running: bool = ...) -> bool: ...

    def get_job(self, job_id: str) -> Job | None: ...


def act(find: Find, filt: JobFilter, limit: int, action: str, one: One) -> BulkReport:
    """Call ``one`` on each job ``filt`` matches, newest first, at most ``limit`` jobs."""
    changed: list[str] = []
    refused: dict[str, str] = {}
    skipped: dict[str, str] = {}
    after: Position | None = None
    done = 0
    while True:
        want = min(PAGE, limit - done)
        rows = find(filt, after, want + 1)
        for job in rows[:want]:
            why = one(job)
            if why is None:
                changed.append(job.id)
            elif isinstance(why, Skip):
                skipped[job.id] = str(why)
            else:
                refused[job.id] = why
        done += min(len(rows), want)
        more = len(rows) > want
        if not more or done >= limit:
            return BulkReport(action, tuple(changed), refused, more, skipped)
        after = Position.of(rows[want - 1])


def retry_many(
    tracker: Mover, find: Find, filt: JobFilter, limit: int, include_unrecoverable: bool = True
) -> BulkReport:
    """``Tracker.retry`` each matching job (failed ones unless ``filt`` names statuses);
    without ``include_unrecoverable``, a failure whose error was not to be retried is
    skipped."""
    filt = filt.restricted_to(RETRIABLE, "retry", default=(JobStatus.FAILED,))

    def one(job: Job) -> str | None:
        if not include_unrecoverable and unrecoverable(job):
            return UNRECOVERABLE
        try:
            if tracker.retry(job.id):
                return None
        except JobNotFound:
            return "no longer exists"
        except (RetryRefused, EnqueueError, InvalidPayload, StoreError) as exc:
            return str(exc)
        return why_not(tracker, job.id, "retried", RETRIABLE)

    return act(find, filt, limit, "retry", one)


def cancel_many(
    tracker: Mover, find: Find, filt: JobFilter, limit: int, reason: str, running: bool
) -> BulkReport:
    """``Tracker.cancel`` each matching job (pending and retrying ones, and running ones
    with ``running``, unless ``filt`` names statuses)."""
    allowed = (*CANCELLABLE, JobStatus.PROCESSING) if running else CANCELLABLE
    filt = filt.restricted_to(allowed, "cancel" + (" --running" if running else ""))

    def one(job: Job) -> str | None:
        try:
            if tracker.cancel(job.id, reason, running=running):
                return None
        except StoreError as exc:
            return str(exc)
        return why_not(tracker, job.id, "cancelled", allowed)

    return act(find, filt, limit, "cancel", one)


def why_not(tracker: Mover, job_id: str, done: str, allowed: Sequence[JobStatus]) -> str:
    """Why a job's move did not apply, from its row now."""
    try:
        job = tracker.get_job(job_id)
    except StoreError as exc:
        return f"not {done}; its status could not be read: {exc}"
    if job is None:
        return "no longer exists"
    if done == "cancelled" and job.status is JobStatus.PROCESSING:
        return "it is running: cancel it with running=True (CLI: --running)"
    names = " or ".join(s.value for s in allowed)
    return f"it is {job.status.value}: only {names} jobs are {done}"
