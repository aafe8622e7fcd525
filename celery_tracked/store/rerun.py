"""The moves around a job's message: a debounce and ``Tracker.retry`` give an existing job
a new one; the relay sends the one its producer never handed over.

Each bumps the row's ``revision`` in the same conditional ``UPDATE`` (compare-and-set on
the revision its caller read) and clears ``published_at``: the caller then publishes a
message of the new revision and records it handed over. A delivery of an older revision
runs nothing (``CLAIM``/``TAKE_OVER`` are fenced to the current one), so only the latest
message ever runs; if the caller dies before publishing, the relay publishes the row.
A publish that failed is undone by the matching ``UNDO_*`` move, fenced to the revision
it made and to a message nobody handed over (not even a relay). An undo never gives the row
an older revision back (that message may have been consumed meanwhile): a debounce's undo
moves on to a newer one, left to the relay (``keys.undo_replace``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from sqlalchemy import Boolean, Integer, String, Text, exists, func, or_, select

from ..core.jobs import RETRY_UNDONE, Job, JobStatus
from ..core.keys import UndoneReplace
from ..core.moves import RetryUndo
from .engines import Applying
from .inserts import DUE_AT
from .models import UTCDateTime, events, jobs
from .statements import JOB_ID, NOW, RELAY_CLAIM, RELAYED, REVISION, Move, param
from .translate import reconnecting, translated

_PENDING = (JobStatus.PENDING,)
_ENDED = (JobStatus.FAILED, JobStatus.CANCELLED)
PAYLOAD = param("payload_json", Text)
#: The arguments a retry sends: given (a re-sent job id's call), else the stored ones.
_SENT_PAYLOAD = func.coalesce(param("payload_json", Text, optional=True), jobs.c.payload_json)
#: the arguments' sealed values (``sealing.py``), NULL when none
SEALED = param("secrets_sealed", Text, optional=True)
#: Attempts the retried job may make from now on.
BUDGET = param("budget", Integer)
OLD_MAX = param("old_max_attempts", Integer)
OLD_FINISHED = param("old_finished_at", UTCDateTime, optional=True)
#: The revision the undone move made.
MADE = param("made", Integer)

_NEW_MESSAGE = {
    "revision": jobs.c.revision + 1,
    "published_at": None,
    "locked_by": None,  # a relay publishing the old message no longer marks it handed over
    "locked_until": None,
    "updated_at": NOW,
}
#: The undone move's message was never handed over, by anyone.
_UNSENT = (jobs.c.revision == MADE, jobs.c.published_at.is_(None), jobs.c.locked_by.is_(None))

#: Debounce: a pending job's arguments replaced by a newer enqueue with its key.
REPLACE = Move(
    "replace",
    _PENDING,
    JobStatus.PENDING,
    # the new message's countdown/eta is the job's due time (``inserts.DUE_AT``)
    {**_NEW_MESSAGE, "payload_json": PAYLOAD, "secrets_sealed": SEALED, "not_before": DUE_AT},
    (jobs.c.revision == REVISION,),
    "debounced",
)
#: A debounce whose publish failed: its previous arguments, at a revision newer than every
#: message sent (``keys.undo_replace``), left unpublished for the relay.
UNDO_REPLACE = Move(
    "undo_replace",
    _PENDING,
    JobStatus.PENDING,
    {
        "payload_json": PAYLOAD,
        "secrets_sealed": SEALED,
        "revision": REVISION,
        "published_at": None,
        "updated_at": NOW,
    },
    _UNSENT,
    "debounce_undone",
)

_newer = jobs.alias("newer")
#: No later job holds the key (a retried job must not run beside its key's newer round).
_NO_NEWER_ROUND = ~exists().where(
    _newer.c.job_type == jobs.c.job_type,
    _newer.c.idempotency_key == jobs.c.idempotency_key,
    _newer.c.key_round > jobs.c.key_round,
)
#: ``Tracker.retry``: failed | cancelled → pending, history kept; attempts keep counting
#: (the attempt number fences a run's outcome, so it never goes back).
RETRY = Move(
    "retry",
    _ENDED,
    JobStatus.PENDING,
    {
        **_NEW_MESSAGE,
        "payload_json": _SENT_PAYLOAD,
        "max_attempts": jobs.c.attempts_made + BUDGET,
        "started_at": None,
        "finished_at": None,
        "retries_exhausted": False,
        "cancel_requested_at": None,  # an old run's request does not cancel the new one
        "secrets_sealed": SEALED,  # the values it is sent with, sealed again
    },
    (jobs.c.revision == REVISION,),
    "retried",
    extra_where=(_NO_NEWER_ROUND,),
)
#: The same move from a completed job too: a re-send of an ended job's id runs it again
#: as a new round (``resend.py``, ``Resender.again``).
RETRY_ENDED = replace(RETRY, name="retry_ended", sources=(JobStatus.COMPLETED, *_ENDED))
_UNDONE_RETRY = {
    "payload_json": func.coalesce(
        param("old_payload_json", Text, optional=True), jobs.c.payload_json
    ),
    "max_attempts": OLD_MAX,
    "finished_at": OLD_FINISHED,
    "retries_exhausted": param("old_retries_exhausted", Boolean),
    "secrets_sealed": param("old_secrets_sealed", Text, optional=True),
    "updated_at": NOW,
}
UNDO_RETRY = {
    ended: Move(f"undo_retry_{ended.value}", _PENDING, ended, _UNDONE_RETRY, _UNSENT, RETRY_UNDONE)
    for ended in RETRY_ENDED.sources
}
#: A job's retries and their undos, in order (``attempt``: the attempts made before each).
SELECT_ROUNDS = (
    select(events.c.event, events.c.attempt)
    .where(
        events.c.job_id == JOB_ID,
        or_(events.c.event == RETRY.event, events.c.event == RETRY_UNDONE),
    )
    .order_by(events.c.id)
)
#: A successor created by a step's failure: a job of the step's pipeline whose parent is
#: the step and whose ``enqueued`` event carries the fail-soft note (``successors.py``).
SELECT_FAIL_SOFT = (
    select(jobs)
    .join(events, events.c.job_id == jobs.c.id)
    .where(
        jobs.c.correlation_id == param("correlation_id", String),
        jobs.c.parent_job_id == JOB_ID,
        events.c.event == "enqueued",
        events.c.message == param("note", Text),
    )
    .order_by(jobs.c.created_at)
    .limit(1)
)


class Rerun(Applying):
    """The message side of :class:`~celery_tracked.store.JobStore` (``Moves.apply``)."""

    @reconnecting
    def replace_arguments(
        self,
        job_id: str,
        *,
        seen_revision: int,
        payload_json: str,
        now: datetime,
        message: str,
        secrets_sealed: str | None = None,
        due_in_s: float | None = None,
        due_at: datetime | None = None,
    ) -> bool:
        """pending → pending with new arguments and revision ``seen_revision + 1``, if the
        job is still pending at ``seen_revision``; due when its new message is (``due_in_s``
        from now on the database's clock, or at ``due_at``; neither: at once)."""
        params = {"job_id": job_id, "at_revision": seen_revision, "payload_json": payload_json}
        params.update(now=now, message=message, secrets_sealed=secrets_sealed)
        params.update(due_in_s=due_in_s, due_at=due_at)
        return self.apply(REPLACE, params) is not None

    @reconnecting
    def undo_replace(
        self, job_id: str, made: int, undo: UndoneReplace, *, now: datetime, message: str
    ) -> bool:
        """pending at revision ``made`` → pending at ``undo.revision`` (newer) with
        ``undo.payload_json`` and no message handed over (the relay's), if nobody handed
        ``made`` over."""
        params = {"job_id": job_id, "made": made, "at_revision": undo.revision, "now": now}
        params.update(payload_json=undo.payload_json, message=message)
        params.update(secrets_sealed=undo.secrets_sealed)
        return self.apply(UNDO_REPLACE, params) is not None

    @reconnecting
    def retry(
        self,
        job_id: str,
        *,
        seen_revision: int,
        budget: int,
        now: datetime,
        message: str,
        secrets_sealed: str | None = None,
        payload_json: str | None = None,
        completed_too: bool = False,
    ) -> bool:
        """failed | cancelled (and completed, ``completed_too``) → pending at revision
        ``seen_revision + 1``, with ``budget`` more attempts, the values it is sent with
        sealed (``secrets_sealed``) and its arguments replaced by ``payload_json`` (None:
        kept); False if it moved meanwhile or a newer job holds its key."""
        params = {"job_id": job_id, "at_revision": seen_revision, "budget": budget, "now": now}
        params.update(message=message, secrets_sealed=secrets_sealed, payload_json=payload_json)
        return self.apply(RETRY_ENDED if completed_too else RETRY, params) is not None

    @reconnecting
    def undo_retry(self, job_id: str, undo: RetryUndo, *, now: datetime, message: str) -> bool:
        """Back to ``undo.status`` (the ended status) and the values before the retry, if
        nobody handed revision ``undo.made`` over."""
        params = {"job_id": job_id, "made": undo.made, "now": now, "message": message}
        params["old_payload_json"] = undo.payload_json
        params.update(old_max_attempts=undo.max_attempts, old_finished_at=undo.finished_at)
        params.update(old_retries_exhausted=undo.retries_exhausted)
        params.update(old_secrets_sealed=undo.secrets_sealed)
        return self.apply(UNDO_RETRY[undo.status], params) is not None

    @reconnecting
    def retry_rounds(self, job_id: str) -> list[tuple[str, int]]:
        """The job's ``retried`` and ``retry_undone`` events, oldest first, each with the
        attempts made before it."""
        with translated("reading the job's retries"), self.engines.transaction() as conn:
            rows = conn.execute(SELECT_ROUNDS, {"job_id": job_id}).all()
        return [(str(r[0]), int(r[1])) for r in rows]

    @reconnecting
    def fail_soft_successor(self, step: Job, note: str) -> Job | None:
        """A successor the failure of ``step`` created (its ``enqueued`` event's message
        is ``note``), if any."""
        pipeline = step.correlation_id or step.id  # a successor's, as ``successors.running``
        params = {"job_id": step.id, "correlation_id": pipeline, "note": note}
        with translated("reading the step's successors"), self.engines.transaction() as conn:
            row = conn.execute(SELECT_FAIL_SOFT, params).mappings().first()
        return None if row is None else Job.from_row(row)

    # -- relay ------------------------------------------------------------------------

    @reconnecting
    def relay_claim(
        self, job_id: str, *, owner: str, now: datetime, lease_s: float, cutoff: datetime
    ) -> bool:
        """Take an unpublished pending row (created or replaced before ``cutoff``) for the relay
        ``owner``, for ``lease_s`` seconds of the database's clock; False if it was
        published, taken or moved meanwhile."""
        params = {"job_id": job_id, "owner": owner, "now": now, "lease_s": lease_s}
        return self.apply(RELAY_CLAIM, {**params, "cutoff": cutoff}) is not None

    @reconnecting
    def relayed(
        self, job_id: str, *, owner: str, now: datetime, message: str, revision: int = 0
    ) -> bool:
        """The relay ``owner`` published the row it claimed (at ``revision``): mark it
        handed over."""
        params = {"job_id": job_id, "owner": owner, "now": now, "message": message}
        params["at_revision"] = revision
        return self.apply(RELAYED, params) is not None
