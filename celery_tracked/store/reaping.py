"""The stalled-job reaper's reads and moves (``reaper.py`` decides; this writes).

A stalled job is one nothing will move any more: ``processing`` under a lease that lapsed
(no run renews it), ``retrying`` long past its due time, ``pending`` long after its message
was handed to the broker. The reaper **rescues** one (a new message revision, so a late
delivery of the old message runs nothing, and a ``rescued`` event) or **abandons** it
(``failed``, ``error_type = "abandoned"``). Each move is one conditional ``UPDATE`` fenced
to exactly the row the reaper judged: the message revision it saw, and for a run the
attempt it saw and a lease that lapsed on the database's clock (``statements.LAPSED``),
so two reapers at once move a row once, and a live lease is never touched. The moves are
in ``transitions.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    exists,
    func,
    insert,
    or_,
    select,
)

from ..core.fences import StaleRun, StallCutoffs
from ..core.jobs import Event, Job, JobStatus
from . import transitions as moves
from .engines import Applying
from .models import UTCDateTime, events, jobs
from .statements import CURRENT, DUE, JOB_ID, MESSAGE, NOW, RESCUED, RETRIED, RUN_STALLED
from .translate import reconnecting, translated

PENDING_CUTOFF = bindparam("pending_cutoff", type_=UTCDateTime)
RETRYING_CUTOFF = bindparam("retrying_cutoff", type_=UTCDateTime)
LIMIT = bindparam("limit", type_=Integer)

_WAITING_MOVES = {
    JobStatus.PENDING: (moves.RESCUE_PENDING, moves.ABANDON_PENDING),
    JobStatus.RETRYING: (moves.RESCUE_RETRYING, moves.ABANDON_RETRYING),
}

_rescued, _retried = events.alias("rescued_events"), events.alias("retried_events")
#: The job's rescues since it was last retried (``Tracker.retry`` starts it afresh). The
#: inner subquery is correlated to the outer ``jobs`` explicitly: SQLAlchemy correlates
#: only to the immediately enclosing SELECT by itself, and would otherwise add
#: ``background_jobs`` to its FROM and take the newest retry of *any* job.
RESCUES = (
    select(func.count())
    .select_from(_rescued)
    .where(
        _rescued.c.job_id == jobs.c.id,
        _rescued.c.event == RESCUED,
        _rescued.c.id
        > func.coalesce(
            select(func.max(_retried.c.id))
            .where(_retried.c.job_id == jobs.c.id, _retried.c.event == RETRIED)
            .correlate(jobs)
            .scalar_subquery(),
            0,
        ),
    )
    .scalar_subquery()
)
#: The rows that look stalled by themselves (the reaper then asks the broker about the
#: waiting ones), oldest first, with their rescue count: the runs and the waiting jobs are
#: read each up to their own limit, so waiting jobs the reaper leaves alone (a backlog
#: older than ``tracked_reaper_pending_seconds``) never hide a lapsed run from it. Each
#: status is read by itself, in ``(status, created_at)`` order: one ``OR`` of the two
#: waiting statuses made PostgreSQL walk the whole ``created_at`` index at 1M rows
#: (400 ms against 1 ms; docs/operations.md).
_STALLED_RUNS = and_(jobs.c.status == JobStatus.PROCESSING.value, RUN_STALLED)
_STALLED_PENDING = and_(
    jobs.c.status == JobStatus.PENDING.value,
    jobs.c.published_at < PENDING_CUTOFF,
    or_(jobs.c.not_before.is_(None), jobs.c.not_before < PENDING_CUTOFF),
    *DUE,
)
_STALLED_RETRYING = and_(
    jobs.c.status == JobStatus.RETRYING.value,
    jobs.c.locked_by.is_(None),  # a pause's hold is the relay's
    jobs.c.not_before < RETRYING_CUTOFF,
    or_(jobs.c.published_at.is_(None), jobs.c.published_at < RETRYING_CUTOFF),
)


def _oldest(where: ColumnElement[bool]) -> Select[Any]:
    return (
        select(jobs, RESCUES.label("rescues"))
        .where(where)
        .order_by(jobs.c.created_at, jobs.c.id)
        .limit(LIMIT)
    )


#: The reaper's two passes over a job whose message it did not find (``reaper.py``): the
#: first writes ``missing``; a later one settles the job only while that is still the job's
#: latest event (no claim, rescue, retry... since), old enough; a pass that finds the
#: message again writes ``found``. Each copied from the row as judged (its revision and
#: status), with the reaper's time (the database's clock).
MISSING = Event.MISSING.value
_later = events.alias("later_events")
SELECT_MISSING = select(events.c.job_id, events.c.created_at).where(
    events.c.job_id.in_(bindparam("job_ids", expanding=True)),
    events.c.event == MISSING,
    ~exists().where(_later.c.job_id == events.c.job_id, _later.c.id > events.c.id),
)
NOTE = insert(events).from_select(
    ["job_id", "event", "status", "attempt", "message", "created_at"],
    select(
        jobs.c.id,
        bindparam("event_name", type_=String),
        jobs.c.status,
        jobs.c.attempts_made,
        MESSAGE,
        NOW,
    ).where(jobs.c.id == JOB_ID, jobs.c.status == bindparam("seen", type_=String), *CURRENT),
)
#: ids per read of the marks (well under SQLite's 999 parameters)
_MARKS_PER_READ = 500

SELECT_STALLED_RUNS = _oldest(_STALLED_RUNS)
SELECT_STALLED_PENDING = _oldest(_STALLED_PENDING)
SELECT_STALLED_RETRYING = _oldest(_STALLED_RETRYING)


class Reaping(Applying):
    """The reaper's side of :class:`~celery_tracked.store.JobStore` (``Apply.apply``)."""

    @reconnecting
    def stalled(self, cutoffs: StallCutoffs, limit: int) -> list[tuple[Job, int]]:
        """The jobs that look stalled by their row, each with its rescue count, oldest
        first: ``processing`` whose lease lapsed ``cutoffs.grace_s`` ago on the database's
        clock (or was released) and expired (or was released) before ``cutoffs.run_cutoff``
        (at most ``limit``), then ``pending`` handed over before ``cutoffs.pending_cutoff``
        and ``retrying`` due before ``cutoffs.retrying_cutoff`` (at most ``limit`` more)."""
        params = {"grace_s": cutoffs.grace_s, "run_cutoff": cutoffs.run_cutoff, "limit": limit}
        params.update(pending_cutoff=cutoffs.pending_cutoff)
        params.update(retrying_cutoff=cutoffs.retrying_cutoff)
        with translated("reading stalled jobs"), self.engines.transaction() as conn:
            runs = conn.execute(SELECT_STALLED_RUNS, params).mappings().all()
            waiting = [
                *conn.execute(SELECT_STALLED_PENDING, params).mappings().all(),
                *conn.execute(SELECT_STALLED_RETRYING, params).mappings().all(),
            ]
        waiting.sort(key=lambda row: (row["created_at"], row["id"]))  # the oldest ``limit``
        rows = [*runs, *waiting[:limit]]
        return [(Job.from_row(row), int(row["rescues"])) for row in rows]

    @reconnecting
    def missing_since(self, job_ids: Sequence[str]) -> dict[str, datetime]:
        """Of ``job_ids``, those whose latest event is ``missing``, with its time."""
        found: dict[str, datetime] = {}
        with translated("reading the reaper's marks"), self.engines.transaction() as conn:
            for at in range(0, len(job_ids), _MARKS_PER_READ):
                ids = list(job_ids[at : at + _MARKS_PER_READ])
                rows = conn.execute(SELECT_MISSING, {"job_ids": ids}).all()
                found.update((job_id, at) for job_id, at in rows)
        return found

    def note(self, job: Job, event: str, message: str, now: datetime) -> None:
        """Append the reaper's ``event`` (``missing``/``found``) to ``job``'s history while
        its row is as judged (status, revision; else nothing); not re-sent on a dead
        connection."""
        params = {"job_id": job.id, "at_revision": job.revision, "seen": job.status.value}
        params.update(event_name=event, message=message, now=now)
        with translated("writing the reaper's mark"), self.engines.transaction() as conn:
            conn.execute(NOTE, params)

    @reconnecting
    def rescue_run(self, job: Job, stale: StaleRun) -> bool:
        """processing → retrying (due now, a new revision) while the row is still ``job``'s
        attempt and revision, stalled as :meth:`stalled` says (``stale.grace_s``,
        ``stale.run_cutoff``); attempts remain."""
        return self.apply(moves.RESCUE_RUN, _run_params(job, stale)) is not None

    @reconnecting
    def abandon_run(self, job: Job, stale: StaleRun, retries_exhausted: bool) -> bool:
        """processing → failed (``abandoned``), fenced like :meth:`rescue_run`."""
        params = {**_run_params(job, stale), "retries_exhausted": retries_exhausted}
        return self.apply(moves.ABANDON_RUN, params) is not None

    @reconnecting
    def cancel_stalled_run(self, job: Job, stale: StaleRun) -> bool:
        """processing → cancelled for a stalled run a cancel was requested of, fenced like
        :meth:`rescue_run`."""
        return self.apply(moves.CANCEL_STALLED_RUN, _run_params(job, stale)) is not None

    @reconnecting
    def rescue_waiting(self, job: Job, *, cutoff: datetime, message: str, now: datetime) -> bool:
        """pending | retrying → the same status with a new message revision, while the row
        is still at ``job``'s revision and its message was handed over (pending) or due
        (retrying) before ``cutoff``."""
        move = _WAITING_MOVES[job.status][0]
        return self.apply(move, _waiting_params(job, cutoff, message, now)) is not None

    @reconnecting
    def abandon_waiting(
        self, job: Job, *, cutoff: datetime, message: str, now: datetime, retries_exhausted: bool
    ) -> bool:
        """pending | retrying → failed (``abandoned``), fenced like :meth:`rescue_waiting`."""
        move = _WAITING_MOVES[job.status][1]
        params = _waiting_params(job, cutoff, message, now)
        params["retries_exhausted"] = retries_exhausted
        return self.apply(move, params) is not None


def _run_params(job: Job, stale: StaleRun) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "attempt": job.attempts_made,
        "at_revision": job.revision,
        "grace_s": stale.grace_s,
        "run_cutoff": stale.run_cutoff,
        "message": stale.message,
        "now": stale.now,
    }


def _waiting_params(job: Job, cutoff: datetime, message: str, now: datetime) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "at_revision": job.revision,
        "cutoff": cutoff,
        "message": message,
        "now": now,
    }
