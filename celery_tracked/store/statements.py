"""The building blocks of the store's SQL, each written once as a SQLAlchemy Core piece:
the named parameters, the fences, the values moves set, the :class:`Move` shape and how a
move compiles.

A status change is a :class:`Move` (every one is in ``transitions.py``): one conditional
``UPDATE`` (``WHERE id AND status IN (...)`` plus the move's fence) and the event that
records it. Both are built from the move by :func:`move_update` and :func:`event_insert`.
On PostgreSQL :func:`move_cte` joins the same two statements into one round trip (a
data-modifying CTE); elsewhere they run one after the other in a transaction. Parameters
are named bind parameters, so a statement is the same object for every job and can be
compiled once (see ``fastpath.py``).
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
    and_,
    bindparam,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.sql.elements import BindParameter

from ..core.jobs import CLAIM_EARLY_S, JobStatus
from ..core.limits import SLOT_HANDED
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
#: A delivery may claim it: due, or due within ``CLAIM_EARLY_S`` (its message's own eta).
_EARLY_S = bindparam("claim_early_s", value=CLAIM_EARLY_S, type_=Float)
DUE_TO_CLAIM = (or_(jobs.c.not_before.is_(None), jobs.c.not_before <= db_time(_EARLY_S)),)
#: Its deadline (if any) has not come on the database's clock: a claim never starts it late.
ALIVE = (or_(jobs.c.deadline_at.is_(None), jobs.c.deadline_at > db_time()),)
#: Nobody holds the row: no lease, or one that ended (on a ``pending`` row, the relay's
#: claim while it publishes the row's message).
UNLOCKED = (or_(jobs.c.locked_until.is_(None), jobs.c.locked_until <= db_time()),)
#: A delivery acts only for the job's current message (not one a debounce replaced).
CURRENT = (jobs.c.revision == REVISION,)
#: A keyed claim's fence: ``CLAIM``'s, the row unlocked or handed a freed slot
#: (``SLOT_HANDED``: only the delivery of the message the hand-off published is current).
KEYED = (*DUE_TO_CLAIM, or_(*UNLOCKED, jobs.c.locked_by == SLOT_HANDED), *CURRENT, *ALIVE)
#: A freed slot may be handed to the waiting row read (its revision), due, nobody's, alive.
HANDABLE = (*CURRENT, *DUE, *UNLOCKED, *ALIVE)
#: No cancel was requested while the job ran (``Tracker.cancel(running=True)``): a run's
#: own outcome, a takeover and the end of a dead run apply only then; otherwise the run
#: ends ``cancelled`` (``CANCEL_RUN`` in ``transitions.py``).
UNCANCELLED = (jobs.c.cancel_requested_at.is_(None),)

#: The jobs of a concurrency key holding a slot: ``processing`` under a live lease, or
#: waiting with a slot handed to them (``HANDED``), until it lapses (on the database's
#: clock), other than the claiming job itself (a takeover holds its own).
#: (not named like the column: an UPDATE would take a column-named parameter as a SET value)
CONCURRENCY_KEY = param("limited_key", String)
_holders = jobs.alias("holders")
_WAITING = (JobStatus.PENDING.value, JobStatus.RETRYING.value)
HOLDERS = (
    select(func.count())
    .select_from(_holders)
    .where(
        _holders.c.concurrency_key == CONCURRENCY_KEY,
        or_(
            _holders.c.status == JobStatus.PROCESSING.value,
            and_(
                or_(*(_holders.c.status == s for s in _WAITING)),
                _holders.c.locked_by == SLOT_HANDED,
            ),
        ),
        _holders.c.locked_until > db_time(),
        _holders.c.id != JOB_ID,
    )
    .scalar_subquery()
)
#: The claim of a keyed job: only while its key has a free slot.
KEY_FREE = (param("concurrency_limit", Integer) > HOLDERS,)

# -- fences shared by reads and moves ---------------------------------------------------

#: A run is stalled once its last sign of life (its lease's expiry, or the release of its
#: lease) is older than this: the reaper's patience, after the takeover grace.
RUN_CUTOFF = param("run_cutoff", UTCDateTime)
#: A lease released, or lapsed more than ``grace_s`` ago on the database's clock (no live
#: holder: the takeover's fence), whose last sign of life is older than ``run_cutoff``.
RUN_STALLED = and_(
    or_(jobs.c.locked_until.is_(None), jobs.c.locked_until < db_time(-GRACE_S)),
    func.coalesce(jobs.c.locked_until, jobs.c.updated_at) < RUN_CUTOFF,
)

_newer = jobs.alias("newer")
#: No later job holds the key (a retried job must not run beside its key's newer round).
NO_NEWER_ROUND = ~exists().where(
    _newer.c.job_type == jobs.c.job_type,
    _newer.c.idempotency_key == jobs.c.idempotency_key,
    _newer.c.key_round > jobs.c.key_round,
)

# -- the parameters of single moves ------------------------------------------------------

#: A postponed delivery's ``published_at`` is refreshed once older than this.
REFRESH_S = param("refresh_s", Float)
#: The worker's clock the claim was sent with (the ``now`` of ``claim``).
CLAIMED_AT = param("claimed_at", UTCDateTime)
PERCENT = param("percent", Integer)
STAGE = param("stage_label", String, optional=True)
PAYLOAD = param("payload_json", Text)
#: The arguments a retry sends: given (a re-sent job id's call), else the stored ones.
SENT_PAYLOAD = func.coalesce(param("payload_json", Text, optional=True), jobs.c.payload_json)
#: the arguments' sealed values (``sealing.py``), NULL when none
SEALED = param("secrets_sealed", Text, optional=True)
#: Attempts the retried job may make from now on.
BUDGET = param("budget", Integer)
#: The relay's (and the scheduler pass's) claim of an unpublished row; a pass judging at
#: a time ahead of the database's clock moves a held row's due time as far forward
#: (``moved_due``; None: kept).
RELAY_CLAIMED = {
    "locked_by": OWNER,
    "locked_until": db_time(LEASE_S),
    "not_before": func.coalesce(param("moved_due", UTCDateTime, optional=True), jobs.c.not_before),
}
OLD_MAX = param("old_max_attempts", Integer)
#: A retry keeps the job's deadline (else sets the one given: ``inserts.DEADLINE_AT``).
KEEP_DEADLINE = param("keep_deadline", Boolean)
OLD_FINISHED = param("old_finished_at", UTCDateTime, optional=True)
#: The revision the undone move made.
MADE = param("made", Integer)
#: The event of a rescue; ``Tracker.retry``'s event starts a new count of them.
RESCUED = "rescued"
RETRIED = "retried"
ABANDONED = "abandoned"
#: The undone move's message was never handed over, by anyone.
UNSENT = (jobs.c.revision == MADE, jobs.c.published_at.is_(None), jobs.c.locked_by.is_(None))

# -- the values the moves of ``transitions.py`` set -----------------------------------

#: A claim or a takeover: the next attempt under a new lease.
TAKE_LEASE: dict[str, Any] = {
    "attempts_made": jobs.c.attempts_made + 1,
    "started_at": func.coalesce(jobs.c.started_at, NOW),
    "worker": param("worker_name", String),
    "locked_by": OWNER,
    "locked_until": db_time(LEASE_S),
    "not_before": None,  # a retrying row's due time, used up by this claim
    "updated_at": NOW,
}
END_RUN: dict[str, Any] = {"updated_at": NOW, "locked_by": None, "locked_until": None}
#: The error of a run that raised.
ERROR = {
    "error_type": param("error_type", String),
    "error_message": param("error_message", Text),
}
#: The last attempt was lost (or killed by the hard time limit): the retries are used up.
LOST = {**END_RUN, "retries_exhausted": True}
#: A job cancelled (waiting, or its run ended as asked).
CANCELLED = {
    **END_RUN,
    "not_before": None,
    "finished_at": NOW,
    "error_type": param("error_type", String, optional=True),  # None: a plain cancel
    "error_message": MESSAGE,
}
RETRY_RUN = {**END_RUN, **ERROR, "not_before": db_time(DELAY_S)}  # after the backoff
FAILED_RUN = {**END_RUN, **ERROR, "finished_at": NOW}
#: A failure written by the run itself says whether it used up the retries.
EXHAUSTED = param("retries_exhausted", Boolean)
#: This very claim set ``started_at``: the row was ``pending``. (SET expressions read the
#: row as it was: on MariaDB, which reads earlier assignments, ``status`` and ``worker``
#: come before ``started_at`` in the table.)
FIRST_START = jobs.c.started_at == CLAIMED_AT
#: A claim given back: the attempt it took restored, its lease released.
RESTORED = {
    "attempts_made": jobs.c.attempts_made - 1,
    "locked_by": None,
    "locked_until": None,
    "updated_at": NOW,
}
#: A retry's or a debounce's new message: the next revision, not handed over, nobody's.
NEW_MESSAGE = {
    "revision": jobs.c.revision + 1,
    "published_at": None,
    "locked_by": None,  # a relay publishing the old message no longer marks it handed over
    "locked_until": None,
    "updated_at": NOW,
}
#: A freed concurrency slot handed to a waiting row: its next message revision (a delivery
#: of the older one runs nothing), not handed over yet, the slot held for it for
#: ``lease_s`` seconds (``SLOT_HANDED``, counted by ``HOLDERS``) until its delivery claims.
HANDED_TO = {**NEW_MESSAGE, "locked_by": SLOT_HANDED, "locked_until": db_time(LEASE_S)}
#: The undo of a retry whose publish failed: the values it had before.
UNDONE_RETRY = {
    "payload_json": func.coalesce(
        param("old_payload_json", Text, optional=True), jobs.c.payload_json
    ),
    "max_attempts": OLD_MAX,
    "finished_at": OLD_FINISHED,
    "retries_exhausted": param("old_retries_exhausted", Boolean),
    "secrets_sealed": param("old_secrets_sealed", Text, optional=True),
    "deadline_at": param("old_deadline_at", UTCDateTime, optional=True),
    "updated_at": NOW,
}
#: A rescue's new message revision: a delivery of an older one runs nothing (``CLAIM`` is
#: fenced).
RESCUE_MESSAGE: dict[str, Any] = {
    "revision": jobs.c.revision + 1,
    "locked_by": None,
    "updated_at": NOW,
}
#: A takeover: attempts left, the current message, no cancel asked, its deadline not come.
TAKEABLE = (jobs.c.attempts_made < jobs.c.max_attempts, *CURRENT, *UNCANCELLED, *ALIVE)
#: A dead run ended ``cancelled``; ``error_type``: NULL, or a deadline's.
DEAD_CANCELLED = {
    **END_RUN,
    "finished_at": NOW,
    "error_type": param("error_type", String, optional=True),
    "error_message": MESSAGE,
}
#: A stalled job abandoned by the reaper.
ABANDON: dict[str, Any] = {
    "locked_by": None,
    "locked_until": None,
    "not_before": None,
    "updated_at": NOW,
    "finished_at": NOW,
    "error_type": ABANDONED,
    "error_message": MESSAGE,
    "retries_exhausted": bindparam("retries_exhausted", type_=Boolean),
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
