"""Every status move of a job row, in one table: from-statuses → to-status, fence, event.

Each :class:`~celery_tracked.store.statements.Move` is one conditional ``UPDATE`` plus its
fence, and the history row it appends (none for lease bookkeeping); its pieces are in
``statements.py``, its one runner is ``apply.py``. ``docs/lifecycle.md`` shows the table
(``make lifecycle``; ``tests/unit/test_transitions.py`` fails when the two differ).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy import ColumnElement, Text, case, func, null, or_

from ..core.deadlines import DEADLINE_EXCEEDED
from ..core.jobs import CLAIMABLE, RETRY_UNDONE, JobStatus
from ..core.pauses import HELD_BY_PAUSE
from . import holds
from . import statements as sql
from .clock import db_time
from .inserts import DEADLINE_AT, DUE_AT
from .models import jobs
from .statements import Move, param

_PROCESSING = (JobStatus.PROCESSING,)
_PENDING = (JobStatus.PENDING,)
_RETRYING = (JobStatus.RETRYING,)
_ENDED = (JobStatus.FAILED, JobStatus.CANCELLED)

# -- claims, outcomes, leases (the worker) ---------------------------------------------

CLAIM = Move(
    "claim",
    CLAIMABLE,
    JobStatus.PROCESSING,
    sql.TAKE_LEASE,
    (*sql.DUE_TO_CLAIM, *sql.UNLOCKED, *sql.CURRENT, *sql.ALIVE),
    event="started",
    durable=False,
)
TAKE_OVER = Move(
    "take_over",
    _PROCESSING,
    JobStatus.PROCESSING,
    sql.TAKE_LEASE,
    fence=sql.LAPSED,
    event="redelivered",
    extra_where=sql.TAKEABLE,
)
#: A keyed claim (or the slot handed to it: ``HAND_SLOT``) and takeover, under the key's lock.
CLAIM_KEYED = replace(CLAIM, name="claim_keyed", fence=sql.KEYED, extra_where=sql.KEY_FREE)
TAKE_OVER_KEYED = Move(
    "take_over_keyed",
    _PROCESSING,
    JobStatus.PROCESSING,
    sql.TAKE_LEASE,
    fence=sql.LAPSED,
    event="redelivered",
    extra_where=(*TAKE_OVER.extra_where, *sql.KEY_FREE),
)
#: The last attempt was lost (or killed by the hard time limit): the retries are used up.
FAIL_LOST = Move(
    "fail_lost",
    _PROCESSING,
    JobStatus.FAILED,
    {**sql.LOST, "error_type": "WorkerLost", "error_message": sql.MESSAGE, "finished_at": sql.NOW},
    fence=sql.LAPSED,
    event="failed",
    extra_where=sql.UNCANCELLED,
)
CANCEL = Move("cancel", CLAIMABLE, JobStatus.CANCELLED, sql.CANCELLED, event="cancelled")
#: An expired message cancels its job only if it is the job's current one.
CANCEL_CURRENT = Move(
    "cancel_current", CLAIMABLE, JobStatus.CANCELLED, sql.CANCELLED, sql.CURRENT, "cancelled"
)
#: A waiting job whose deadline came (the database's clock) before it started.
EXPIRE = Move(
    "expire",
    CLAIMABLE,
    JobStatus.CANCELLED,
    {**sql.CANCELLED, "error_type": DEADLINE_EXCEEDED},
    (jobs.c.deadline_at <= db_time(),),
    "cancelled",
)
COMPLETE = Move(
    "complete",
    _PROCESSING,
    JobStatus.COMPLETED,
    {
        **sql.END_RUN,
        "result_json": param("result_json", Text, optional=True),
        "finished_at": sql.NOW,
        "error_type": None,
        "error_message": None,
        "progress": 100,
    },
    fence=sql.HELD,
    event="completed",
    extra_where=sql.UNCANCELLED,
)


def _run_ends(
    name: str, target: JobStatus, values: Mapping[str, Any], fence: tuple[ColumnElement[bool], ...]
) -> Move:
    """processing → ``target`` (retrying or failed) under ``fence``, while no cancel was
    requested; the event is named after the status."""
    return Move(name, _PROCESSING, target, values, fence, target.value, True, sql.UNCANCELLED)


RETRYING = _run_ends("retrying", JobStatus.RETRYING, sql.RETRY_RUN, sql.HELD)
FAIL = _run_ends(
    "fail", JobStatus.FAILED, {**sql.FAILED_RUN, "retries_exhausted": sql.EXHAUSTED}, sql.HELD
)
# A run that died outside its call path, ended once its holder is dead (as a takeover).
RETRY_DEAD = _run_ends("retry_dead", JobStatus.RETRYING, sql.RETRY_RUN, sql.LAPSED)
FAIL_DEAD = _run_ends("fail_dead", JobStatus.FAILED, {**sql.FAILED_RUN, **sql.LOST}, sql.LAPSED)
#: ``revoke(terminate=True)`` ends a running job.
CANCEL_DEAD = Move(
    "cancel_dead", _PROCESSING, JobStatus.CANCELLED, sql.DEAD_CANCELLED, sql.LAPSED, "cancelled"
)
RENEW = Move(
    "renew", _PROCESSING, None, {"locked_until": db_time(sql.LEASE_S)}, sql.HELD, durable=False
)
RELEASE = Move("release", _PROCESSING, None, sql.END_RUN, sql.HELD)

# -- the message: hand-over, relay ----------------------------------------------------

#: The producer's mark after its publish (any status: a worker may have claimed it).
HANDED_OVER = Move(
    "handed_over",
    tuple(JobStatus),
    None,
    {"published_at": sql.NOW},
    fence=(jobs.c.published_at.is_(None), *sql.CURRENT),
    durable=False,  # lost, it only lets the relay send a harmless duplicate
)
#: A postponed delivery re-sent its message: ``published_at`` now, once older than ``refresh_s``.
REPUBLISHED = Move(
    "republished",
    CLAIMABLE,
    None,
    {"published_at": db_time()},
    fence=(jobs.c.published_at < db_time(-sql.REFRESH_S), *sql.CURRENT),
    durable=False,  # lost, the reaper asks the broker and the workers, as before
)
#: A relay takes an unpublished row for ``lease_s`` seconds; many relays may run at once.
RELAY_CLAIM = Move(
    "relay_claim",
    CLAIMABLE,
    None,
    sql.RELAY_CLAIMED,
    holds.UNPUBLISHED,
)
#: The relay published the row it claimed (its status kept).
RELAYED = Move(
    "relayed",
    CLAIMABLE,
    None,
    {"published_at": sql.NOW, "locked_by": None, "locked_until": None, "updated_at": sql.NOW},
    fence=(jobs.c.locked_by == sql.OWNER, jobs.c.published_at.is_(None), *sql.CURRENT),
    event="relayed",
)
#: A paused delivery held in the database (new revision, no message, no attempt used).
HOLD = Move(
    "hold",
    CLAIMABLE,
    None,
    {**sql.NEW_MESSAGE, "locked_by": HELD_BY_PAUSE},
    (*sql.CURRENT, *sql.UNLOCKED),
    "paused",
)
#: The scheduler pass published a held row it claimed (``RELAY_CLAIM``) as it came due.
SCHEDULED = replace(RELAYED, name="scheduled", sources=_PENDING, event="scheduled")
#: An open circuit's delivery held in the database, as a pause's (``core/circuits.py``).
_CIRCUIT_HELD = {**sql.NEW_MESSAGE, "locked_by": holds.HELD_BY}
CIRCUIT_HOLD = replace(HOLD, name="circuit_hold", values=_CIRCUIT_HELD, event="circuit_open")
#: A half-open circuit's pass takes one row it held, to publish it as the probe.
PROBE_CLAIM = replace(
    RELAY_CLAIM, name="probe_claim", fence=(jobs.c.locked_by == holds.HELD_BY, *holds.UNSENT_HELD)
)
PROBE_SENT = replace(RELAYED, name="probe_sent", event="circuit_probe")  # its hand-over

#: A freed concurrency slot handed to a due waiting job, under the key's lock (``handoff.py``).
HAND_SLOT = Move(
    "hand_slot", CLAIMABLE, None, sql.HANDED_TO, sql.HANDABLE, "slot_handed", False, sql.KEY_FREE
)

# -- a cancel of a running job --------------------------------------------------------

#: processing → processing with a cancel request (once).
REQUEST_CANCEL = Move(
    "request_cancel",
    _PROCESSING,
    JobStatus.PROCESSING,
    {"cancel_requested_at": sql.NOW, "updated_at": sql.NOW},
    (jobs.c.cancel_requested_at.is_(None),),
    "cancel_requested",
)
#: A run asked to stop ends ``cancelled`` (its own end, or the reaper's of a stalled one).
_AS_ASKED = {**sql.DEAD_CANCELLED, "error_type": None}
#: The run asked to stop ended (its body returned or raised): processing → cancelled.
CANCEL_RUN = Move(
    "cancel_run",
    _PROCESSING,
    JobStatus.CANCELLED,
    _AS_ASKED,
    (*sql.HELD, jobs.c.cancel_requested_at.is_not(None)),
    "cancelled",
)

# -- a claim given back before its body started ---------------------------------------

_MINE = (*sql.HELD, jobs.c.locked_by == sql.OWNER)

GIVE_BACK = Move(
    "give_back",
    _PROCESSING,
    None,  # the status it had: pending or retrying
    {
        **sql.RESTORED,
        "status": case((sql.FIRST_START, JobStatus.PENDING.value), else_=JobStatus.RETRYING.value),
        "worker": case((sql.FIRST_START, null()), else_=jobs.c.worker),
        "started_at": case((sql.FIRST_START, null()), else_=jobs.c.started_at),
    },
    _MINE,
    "given_back",
)
GIVE_BACK_TAKEOVER = Move(
    "give_back_takeover", _PROCESSING, JobStatus.PROCESSING, sql.RESTORED, _MINE, "given_back"
)

# -- a body's progress ----------------------------------------------------------------

PROGRESS = Move(
    "progress",
    (JobStatus.PROCESSING,),
    None,
    {
        "progress": sql.PERCENT,
        "stage": func.coalesce(sql.STAGE, jobs.c.stage),
        "updated_at": sql.NOW,
    },
    sql.HELD,
    durable=False,
)

# -- a new message: debounce, Tracker.retry -------------------------------------------

#: Debounce: a pending job's arguments replaced (its new due time: ``inserts.DUE_AT``).
REPLACE = Move(
    "replace",
    _PENDING,
    JobStatus.PENDING,
    {
        **sql.NEW_MESSAGE,
        "payload_json": sql.PAYLOAD,
        "secrets_sealed": sql.SEALED,
        "not_before": DUE_AT,
    },
    (jobs.c.revision == sql.REVISION,),
    "debounced",
)
#: A debounce whose publish failed: its previous arguments, newer revision, for the relay.
UNDO_REPLACE = Move(
    "undo_replace",
    _PENDING,
    JobStatus.PENDING,
    {
        "payload_json": sql.PAYLOAD,
        "secrets_sealed": sql.SEALED,
        "revision": sql.REVISION,
        "published_at": None,
        "updated_at": sql.NOW,
    },
    sql.UNSENT,
    "debounce_undone",
)

#: ``Tracker.retry``: failed | cancelled → pending, history kept; attempts keep counting;
#: due when its message is (a re-send's countdown/eta, ``inserts.DUE_AT``), else at once.
RETRY = Move(
    "retry",
    _ENDED,
    JobStatus.PENDING,
    {
        **sql.NEW_MESSAGE,
        "payload_json": sql.SENT_PAYLOAD,
        "max_attempts": jobs.c.attempts_made + sql.BUDGET,
        "started_at": None,
        "finished_at": None,
        "retries_exhausted": False,
        "cancel_requested_at": None,  # an old run's request does not cancel the new one
        "secrets_sealed": sql.SEALED,  # the values it is sent with, sealed again
        "not_before": DUE_AT,
        "deadline_at": case((sql.KEEP_DEADLINE, jobs.c.deadline_at), else_=DEADLINE_AT),
    },
    (jobs.c.revision == sql.REVISION,),
    "retried",
    extra_where=(sql.NO_NEWER_ROUND,),
)
#: The same from completed too: a re-sent ended job's id (``Resender.again``).
RETRY_ENDED = replace(RETRY, name="retry_ended", sources=(JobStatus.COMPLETED, *_ENDED))
UNDO_RETRY = {
    ended: Move(
        f"undo_retry_{ended.value}", _PENDING, ended, sql.UNDONE_RETRY, sql.UNSENT, RETRY_UNDONE
    )
    for ended in RETRY_ENDED.sources
}

# -- the reaper -----------------------------------------------------------------------

_RUN_FENCE = (*sql.LAPSED, *sql.CURRENT, sql.RUN_STALLED)
#: A pending job handed over and due before the cutoff: the reaper never publishes one early.
_PENDING_FENCE = (
    *sql.CURRENT,
    *sql.DUE,
    jobs.c.published_at < sql.CUTOFF,
    or_(jobs.c.not_before.is_(None), jobs.c.not_before < sql.CUTOFF),
)
#: A retrying job due before the cutoff, not re-sent since, nobody's (a pause's: relay's).
_RETRYING_FENCE = (
    *sql.CURRENT,
    jobs.c.locked_by.is_(None),
    jobs.c.not_before < sql.CUTOFF,
    or_(jobs.c.published_at.is_(None), jobs.c.published_at < sql.CUTOFF),
)

#: processing → retrying, due at once: the lost attempt counted, its next one to come.
RESCUE_RUN = Move(
    "rescue_run",
    _PROCESSING,
    JobStatus.RETRYING,
    {
        **sql.RESCUE_MESSAGE,
        "locked_until": None,
        "not_before": db_time(),
        "error_type": "WorkerLost",
        "error_message": sql.MESSAGE,
    },
    _RUN_FENCE,
    sql.RESCUED,
    extra_where=(jobs.c.attempts_made < jobs.c.max_attempts, *sql.UNCANCELLED),
)
#: pending → pending with a new message (handed over once published; else the relay's).
RESCUE_PENDING = Move(
    "rescue_pending",
    _PENDING,
    JobStatus.PENDING,
    {**sql.RESCUE_MESSAGE, "locked_until": None, "published_at": None},
    _PENDING_FENCE,
    sql.RESCUED,
)
#: retrying → retrying with a new message, due at once.
RESCUE_RETRYING = Move(
    "rescue_retrying",
    _RETRYING,
    JobStatus.RETRYING,
    {**sql.RESCUE_MESSAGE, "not_before": db_time()},
    _RETRYING_FENCE,
    sql.RESCUED,
)
ABANDON_RUN = Move(
    "abandon_run",
    _PROCESSING,
    JobStatus.FAILED,
    sql.ABANDON,
    _RUN_FENCE,
    "failed",
    extra_where=sql.UNCANCELLED,
)
#: A stalled run that was asked to stop (``Tracker.cancel(running=True)``) ends as asked.
CANCEL_STALLED_RUN = Move(
    "cancel_stalled_run",
    _PROCESSING,
    JobStatus.CANCELLED,
    _AS_ASKED,
    _RUN_FENCE,
    "cancelled",
    extra_where=(jobs.c.cancel_requested_at.is_not(None),),
)
ABANDON_PENDING = Move(
    "abandon_pending", _PENDING, JobStatus.FAILED, sql.ABANDON, _PENDING_FENCE, "failed"
)
ABANDON_RETRYING = Move(
    "abandon_retrying", _RETRYING, JobStatus.FAILED, sql.ABANDON, _RETRYING_FENCE, "failed"
)


#: Every move, in the table's order.
MOVES = (*(v for v in tuple(globals().values()) if isinstance(v, Move)), *UNDO_RETRY.values())
