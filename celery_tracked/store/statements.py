"""Every SQL statement celery-tracked runs, each written once as a SQLAlchemy Core statement.

A status change is a :class:`Move`: one conditional ``UPDATE`` (``WHERE id AND status IN
(...)`` plus the move's fence) and the event that records it. Both are built from the move
by :func:`move_update` and :func:`event_insert`. On PostgreSQL :func:`move_cte` joins the
same two statements into one round trip (a data-modifying CTE); elsewhere they run one
after the other in a transaction. Parameters are named bind parameters, so a statement is
the same object for every job and can be compiled once (see ``fastpath.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    CTE,
    Boolean,
    ColumnElement,
    Float,
    FromClause,
    Insert,
    Integer,
    Select,
    String,
    Text,
    Update,
    bindparam,
    func,
    insert,
    literal,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.sql.elements import BindParameter

from ..core.jobs import CLAIMABLE, JobStatus
from .clock import db_time
from .models import UTCDateTime, events, jobs


def param(name: str, type_: Any, optional: bool = False) -> BindParameter[Any]:
    """A named parameter; ``optional`` ones default to NULL."""
    if optional:
        return bindparam(name, value=None, type_=type_)
    return bindparam(name, type_=type_)


JOB_ID = param("job_id", String)
#: the worker's clock: for the record (``started_at``, ``updated_at``, events), never leases
NOW = param("now", UTCDateTime)
#: lease expiry and backoff are judged on the database's clock (``clock.db_time``)
LEASE_S = param("lease_s", Float)
GRACE_S = param("grace_s", Float)
DELAY_S = param("delay_s", Float)
ATTEMPT = param("attempt", Integer)
#: The revision of the job's message a delivery or a producer acts for (see ``rerun.py``).
REVISION = param("at_revision", Integer)
MESSAGE = param("message", Text, optional=True)
DURATION_MS = param("duration_ms", Integer, optional=True)
STALE_OWNER = param("stale_owner", String, optional=True)
OWNER = param("owner", String)
#: Rows created before it whose message was never handed over are the relay's.
CUTOFF = param("cutoff", UTCDateTime)

#: The run's fence: the attempt it claimed (or, for a takeover, the attempt last seen).
HELD = (jobs.c.attempts_made == ATTEMPT,)
#: A lease released, expired for longer than the grace, or whose holder is known dead.
LAPSED = (
    jobs.c.attempts_made == ATTEMPT,
    or_(
        jobs.c.locked_until.is_(None),
        jobs.c.locked_until < db_time(-GRACE_S),
        jobs.c.locked_by == STALE_OWNER,
    ),
)
#: The job may start (``not_before``: a retry's backoff, a countdown/eta; NULL: at once).
DUE = (or_(jobs.c.not_before.is_(None), jobs.c.not_before <= db_time()),)
#: Nobody holds the row: no lease, or one that ended (on a ``pending`` row, the relay's
#: claim while it publishes the row's message).
UNLOCKED = (or_(jobs.c.locked_until.is_(None), jobs.c.locked_until <= db_time()),)
#: A delivery acts only for the job's current message (not one a debounce replaced).
CURRENT = (jobs.c.revision == REVISION,)
#: No cancel was requested while the job ran (``Tracker.cancel(running=True)``): a run's
#: own outcome, a takeover and the end of a dead run apply only then; otherwise the run
#: ends ``cancelled`` (``store/cancels.py``).
UNCANCELLED = (jobs.c.cancel_requested_at.is_(None),)

#: The jobs of a concurrency key holding a slot: ``processing`` under a live lease (on the
#: database's clock), other than the claiming job itself (a takeover holds its own).
#: (not named like the column: an UPDATE would take a column-named parameter as a SET value)
CONCURRENCY_KEY = param("limited_key", String)
_holders = jobs.alias("holders")
HOLDERS = (
    select(func.count())
    .select_from(_holders)
    .where(
        _holders.c.concurrency_key == CONCURRENCY_KEY,
        _holders.c.status == JobStatus.PROCESSING.value,
        _holders.c.locked_until > db_time(),
        _holders.c.id != JOB_ID,
    )
    .scalar_subquery()
)
#: The claim of a keyed job: only while its key has a free slot.
KEY_FREE = (param("concurrency_limit", Integer) > HOLDERS,)

_TAKE_LEASE: dict[str, Any] = {
    "attempts_made": jobs.c.attempts_made + 1,
    "started_at": func.coalesce(jobs.c.started_at, NOW),
    "worker": param("worker_name", String),
    "locked_by": OWNER,
    "locked_until": db_time(LEASE_S),
    "not_before": None,  # a retrying row's due time, used up by this claim
    "updated_at": NOW,
}
_END_RUN: dict[str, Any] = {"updated_at": NOW, "locked_by": None, "locked_until": None}
_ERROR = {
    "error_type": param("error_type", String),
    "error_message": param("error_message", Text),
}


@dataclass(frozen=True, eq=False)  # hashed by identity: statements are cached per move
class Move:
    """One allowed change of a row: from ``sources``, under ``fence``, to ``target``.

    ``event`` names the history row it appends (none for lease bookkeeping), with the
    row's new status (a move whose ``values`` compute the status has no ``target``);
    ``durable`` is False only for writes whose loss merely lets a job run again (claim,
    renewal).
    """

    name: str
    sources: tuple[JobStatus, ...]
    target: JobStatus | None
    values: Mapping[str, Any]
    fence: tuple[ColumnElement[bool], ...] = ()
    event: str | None = None
    durable: bool = True
    extra_where: tuple[ColumnElement[bool], ...] = field(default=())


_PROCESSING = (JobStatus.PROCESSING,)

CLAIM = Move(
    "claim",
    CLAIMABLE,
    JobStatus.PROCESSING,
    _TAKE_LEASE,
    (*DUE, *UNLOCKED, *CURRENT),
    event="started",
    durable=False,
)
TAKE_OVER = Move(
    "take_over",
    _PROCESSING,
    JobStatus.PROCESSING,
    _TAKE_LEASE,
    fence=LAPSED,
    event="redelivered",
    extra_where=(jobs.c.attempts_made < jobs.c.max_attempts, *CURRENT, *UNCANCELLED),
)
#: The claim and the takeover of a job with a concurrency key (run under the key's lock,
#: ``slots.py``, so two claims never both see a free slot).
CLAIM_KEYED = Move(
    "claim_keyed", CLAIM.sources, CLAIM.target, _TAKE_LEASE, CLAIM.fence, "started", False, KEY_FREE
)
TAKE_OVER_KEYED = Move(
    "take_over_keyed",
    _PROCESSING,
    JobStatus.PROCESSING,
    _TAKE_LEASE,
    fence=LAPSED,
    event="redelivered",
    extra_where=(*TAKE_OVER.extra_where, *KEY_FREE),
)
#: The last attempt was lost (or killed by the hard time limit): the retries are used up.
_LOST = {**_END_RUN, "retries_exhausted": True}
FAIL_LOST = Move(
    "fail_lost",
    _PROCESSING,
    JobStatus.FAILED,
    {**_LOST, "error_type": "WorkerLost", "error_message": MESSAGE, "finished_at": NOW},
    fence=LAPSED,
    event="failed",
    extra_where=UNCANCELLED,
)
_CANCELLED = {
    **_END_RUN,
    "not_before": None,
    "finished_at": NOW,
    "error_type": None,
    "error_message": MESSAGE,
}
CANCEL = Move("cancel", CLAIMABLE, JobStatus.CANCELLED, _CANCELLED, event="cancelled")
#: An expired message cancels its job only if it is the job's current one.
CANCEL_CURRENT = Move(
    "cancel_current", CLAIMABLE, JobStatus.CANCELLED, _CANCELLED, CURRENT, "cancelled"
)
COMPLETE = Move(
    "complete",
    _PROCESSING,
    JobStatus.COMPLETED,
    {
        **_END_RUN,
        "result_json": param("result_json", Text, optional=True),
        "finished_at": NOW,
        "error_type": None,
        "error_message": None,
        "progress": 100,
    },
    fence=HELD,
    event="completed",
    extra_where=UNCANCELLED,
)
_RETRY_RUN = {**_END_RUN, **_ERROR, "not_before": db_time(DELAY_S)}  # after the backoff
_FAILED_RUN = {**_END_RUN, **_ERROR, "finished_at": NOW}
#: A failure written by the run itself says whether it used up the retries.
_EXHAUSTED = param("retries_exhausted", Boolean)


def _run_ends(
    name: str, target: JobStatus, values: Mapping[str, Any], fence: tuple[ColumnElement[bool], ...]
) -> Move:
    """processing → ``target`` (retrying or failed) under ``fence``, while no cancel was
    requested; the event is named after the status."""
    return Move(name, _PROCESSING, target, values, fence, target.value, True, UNCANCELLED)


RETRYING = _run_ends("retrying", JobStatus.RETRYING, _RETRY_RUN, HELD)
FAIL = _run_ends("fail", JobStatus.FAILED, {**_FAILED_RUN, "retries_exhausted": _EXHAUSTED}, HELD)
# A run that died outside its call path (killed by the hard time limit, terminated by a
# revoke) is ended from the worker's main process once its holder is dead: fenced like a
# takeover (the attempt last seen, and a lease that lapsed or whose owner is dead).
RETRY_DEAD = _run_ends("retry_dead", JobStatus.RETRYING, _RETRY_RUN, LAPSED)
FAIL_DEAD = _run_ends("fail_dead", JobStatus.FAILED, {**_FAILED_RUN, **_LOST}, LAPSED)
#: Not in the design's first list of moves: ``revoke(terminate=True)`` ends a running job.
CANCEL_DEAD = Move(
    "cancel_dead",
    _PROCESSING,
    JobStatus.CANCELLED,
    {**_END_RUN, "finished_at": NOW, "error_type": None, "error_message": MESSAGE},
    LAPSED,
    "cancelled",
)
RENEW = Move("renew", _PROCESSING, None, {"locked_until": db_time(LEASE_S)}, HELD, durable=False)
RELEASE = Move("release", _PROCESSING, None, _END_RUN, HELD)


#: A pending row whose message was never handed to the broker, old enough to be relayed
#: (created, or its message last replaced, before the cutoff), not held by a relay now.
UNPUBLISHED = (
    jobs.c.published_at.is_(None),
    jobs.c.updated_at < CUTOFF,
    or_(jobs.c.locked_until.is_(None), jobs.c.locked_until < db_time()),
)
_PENDING = (JobStatus.PENDING,)

#: The producer's mark after its publish (any status: a fast worker may have claimed it).
HANDED_OVER = Move(
    "handed_over",
    tuple(JobStatus),
    None,
    {"published_at": NOW},
    fence=(jobs.c.published_at.is_(None), *CURRENT),
    durable=False,  # lost, it only lets the relay send a harmless duplicate
)
#: A delivery of a waiting job was postponed (a rate limit, a full concurrency key): its
#: message is handed to the broker again, so ``published_at`` moves to now on the
#: database's clock, once it is older than ``refresh_s`` (a row written at most that
#: often; a fresh one is not even locked). The reaper takes it as the message's sign of
#: life (``reaper.py``).
REFRESH_S = param("refresh_s", Float)
REPUBLISHED = Move(
    "republished",
    CLAIMABLE,
    None,
    {"published_at": db_time()},
    fence=(jobs.c.published_at < db_time(-REFRESH_S), *CURRENT),
    durable=False,  # lost, the reaper asks the broker and the workers, as before
)
#: A relay takes an unpublished row for ``lease_s`` seconds; many relays may run at once.
RELAY_CLAIM = Move(
    "relay_claim",
    _PENDING,
    None,
    {"locked_by": OWNER, "locked_until": db_time(LEASE_S)},
    UNPUBLISHED,
)
#: The relay published the row it claimed.
RELAYED = Move(
    "relayed",
    _PENDING,
    JobStatus.PENDING,
    {"published_at": NOW, "locked_by": None, "locked_until": None, "updated_at": NOW},
    fence=(jobs.c.locked_by == OWNER, jobs.c.published_at.is_(None), *CURRENT),
    event="relayed",
)


def _status_in(statuses: Sequence[JobStatus]) -> ColumnElement[bool]:
    # plain OR of equalities, not IN: an expanding IN could not be compiled once for all
    return or_(*(jobs.c.status == s.value for s in statuses))


@functools.cache
def move_update(move: Move) -> Update:
    """The move's conditional ``UPDATE`` of ``background_jobs``."""
    values = dict(move.values)
    if move.target is not None:
        values["status"] = move.target.value
    return (
        update(jobs)
        .where(jobs.c.id == JOB_ID, _status_in(move.sources), *move.fence, *move.extra_where)
        .values(values)
    )


@functools.cache
def event_insert(source: FromClause, event: str, status: JobStatus | None) -> Insert:
    """The history row of a change: copied from ``source`` (the changed row), so its
    attempt is the row's ``attempts_made`` after the change (and its status, when no
    ``status`` is given)."""
    columns = ["job_id", "event", "status", "attempt", "message", "duration_ms", "created_at"]
    rows = select(
        source.c.id,
        literal(event, String),
        source.c.status if status is None else literal(status.value, String),
        source.c.attempts_made,
        MESSAGE,
        DURATION_MS,
        NOW,
    )
    if source is jobs:
        rows = rows.where(jobs.c.id == JOB_ID)
    return insert(events).from_select(columns, rows)


@functools.cache
def commit_mode(durable: bool) -> Select[Any]:
    """PostgreSQL: ``synchronous_commit`` for the rest of this transaction, ``on`` for a
    durable move whatever the server's default, ``off`` for one whose loss only lets a job
    run again. Part of the statement itself (no session setting, no libpq ``options``), so
    it holds behind PgBouncer's transaction pooling."""
    mode = literal("on" if durable else "off", String)
    return select(func.set_config(literal("synchronous_commit", String), mode, true()))


def committed(
    changed: CTE, durable: bool, history: tuple[str, JobStatus | None] | None
) -> Select[Any]:
    """PostgreSQL: one statement around the data-modifying CTE ``changed`` (it returns the
    changed row's ``id, attempts_made, max_attempts``, and its ``status`` when the history's
    status is None): the history row ``(event, status)`` copied from it, and the commit
    mode (``commit_mode(durable)``) joined to it; selects the changed row's
    ``attempts_made, max_attempts`` (no row: nothing changed)."""
    mode = commit_mode(durable).cte("commit_mode")
    query = select(changed.c.attempts_made, changed.c.max_attempts).select_from(
        changed.join(mode, true())
    )
    if history is not None:
        query = query.add_cte(event_insert(changed, *history).cte("history"))
    return query


@functools.cache
def move_cte(move: Move) -> Select[Any]:
    """PostgreSQL: the move's ``UPDATE`` and its event in one statement, committed as
    durably as the move needs; selects the moved row's ``attempts_made, max_attempts``
    (no row: the move did not apply)."""
    status = (jobs.c.status,) if move.target is None else ()
    moved = (
        move_update(move)
        .returning(jobs.c.id, jobs.c.attempts_made, jobs.c.max_attempts, *status)
        .cte("moved")
    )
    history = None if move.event is None else (move.event, move.target)
    return committed(moved, move.durable, history)
