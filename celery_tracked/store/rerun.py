"""``Tracker.retry`` and ``Tracker.cancel`` (``RerunStore``): a retry gives an ended job a
new message (and its undo when the publish failed); a cancel ends a waiting job, or asks a
running one to stop; the reads of a job's retries and of a fail-soft successor. (A
debounce's replacement is ``enqueue.py``'s, the relay's moves ``relay.py``'s.)

A retry and a debounce (``enqueue.py``) give an existing job a new message. Each bumps the
row's ``revision`` in the same conditional ``UPDATE`` (compare-and-set on the revision its
caller read) and clears ``published_at``: the caller then publishes a
message of the new revision and records it handed over. A delivery of an older revision
runs nothing (``CLAIM``/``TAKE_OVER`` are fenced to the current one), so only the latest
message ever runs; if the caller dies before publishing, the relay publishes the row.
A publish that failed is undone by the matching ``UNDO_*`` move, fenced to the revision
it made and to a message nobody handed over (not even a relay). An undo never gives the row
an older revision back (that message may have been consumed meanwhile): a debounce's undo
moves on to a newer one, left to the relay (``keys.undo_replace``).

A cancel of a running job (``Tracker.cancel(job_id, running=True)``) records a request
(``REQUEST_CANCEL``: ``cancel_requested_at`` set, a ``cancel_requested`` event; the job stays
``processing`` while its run goes on). From then on the run's own outcome, a takeover and
the end of a dead run are fenced out (``statements.UNCANCELLED``); the run that still holds
the job ends it with ``CANCEL_RUN`` (``outcomes.py``), a run that died is ended by
``CANCEL_DEAD``, and a body polls the request (``reports.py``, ``cancel_wanted``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import String, Text, or_, select

from ..core.deadlines import NO_DEADLINE, Deadline
from ..core.fences import RetryUndo
from ..core.jobs import RETRY_UNDONE, Job
from . import transitions as moves
from .engines import Applying
from .models import events, jobs
from .statements import JOB_ID, param
from .translate import reconnecting, translated

#: A job's retries and their undos, in order (``attempt``: the attempts made before each).
SELECT_ROUNDS = (
    select(events.c.event, events.c.attempt)
    .where(
        events.c.job_id == JOB_ID,
        or_(events.c.event == moves.RETRY.event, events.c.event == RETRY_UNDONE),
    )
    .order_by(events.c.id)
)
#: A successor created by a step's failure: a job of the step's pipeline whose parent is
#: the step and whose ``enqueued`` event carries the fail-soft note (``pipelines.py``).
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
    """The message side of :class:`~celery_tracked.store.JobStore` (``Apply.apply``)."""

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
        due_in_s: float | None = None,
        due_at: datetime | None = None,
        deadline: Deadline | None = None,
    ) -> bool:
        """failed | cancelled (and completed, ``completed_too``) → pending at revision
        ``seen_revision + 1``, with ``budget`` more attempts, the values it is sent with
        sealed (``secrets_sealed``) and its arguments replaced by ``payload_json`` (None:
        kept); due when its message is (``due_in_s`` from now on the database's clock, or
        at ``due_at``; neither: at once), by ``deadline`` (None: its own kept; ``NO_DEADLINE``:
        none). False if it moved meanwhile or a newer job holds its key."""
        params = {"job_id": job_id, "at_revision": seen_revision, "budget": budget, "now": now}
        params.update(message=message, secrets_sealed=secrets_sealed, payload_json=payload_json)
        params.update(due_in_s=due_in_s, due_at=due_at, keep_deadline=deadline is None)
        given = deadline or NO_DEADLINE
        params.update(deadline_in_s=given.in_s, deadline_at=given.at)
        return self.apply(moves.RETRY_ENDED if completed_too else moves.RETRY, params) is not None

    @reconnecting
    def undo_retry(self, job_id: str, undo: RetryUndo, *, now: datetime, message: str) -> bool:
        """Back to ``undo.status`` (the ended status) and the values before the retry, if
        nobody handed revision ``undo.made`` over."""
        params = {"job_id": job_id, "made": undo.made, "now": now, "message": message}
        params["old_payload_json"] = undo.payload_json
        params.update(old_max_attempts=undo.max_attempts, old_finished_at=undo.finished_at)
        params.update(old_retries_exhausted=undo.retries_exhausted)
        params.update(old_secrets_sealed=undo.secrets_sealed, old_deadline_at=undo.deadline_at)
        return self.apply(moves.UNDO_RETRY[undo.status], params) is not None

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

    @reconnecting
    def cancel(
        self,
        job_id: str,
        *,
        now: datetime,
        reason: str,
        revision: int | None = None,
        error_type: str | None = None,
    ) -> bool:
        """pending | retrying → cancelled (with ``revision``: only while the job's message
        is that one; ``error_type``: why, when not a plain cancel). A running job is never
        interrupted."""
        params: dict[str, Any] = {"job_id": job_id, "now": now, "message": reason}
        params["error_type"] = error_type
        if revision is None:
            return self.apply(moves.CANCEL, params) is not None
        return self.apply(moves.CANCEL_CURRENT, {**params, "at_revision": revision}) is not None

    @reconnecting
    def request_cancel(self, job_id: str, *, now: datetime, message: str) -> bool:
        """Record a cancel request on a ``processing`` job; False if it is not
        ``processing`` or a request is already recorded."""
        params = {"job_id": job_id, "now": now, "message": message}
        return self.apply(moves.REQUEST_CANCEL, params) is not None
