"""A claim given back before its body started (a ``before_body`` hook refused the start:
the global rate limiter, ``limiter.py``). No body ran, so the attempt the claim took is
restored and the row returns to the status it had, in one conditional ``UPDATE`` fenced by
the claim (its attempt and its owner) plus a ``given_back`` event:

- the claim of a ``pending`` row (its claim set ``started_at``: nothing started since the
  job's enqueue or ``Tracker.retry``, which clears it) → ``pending``, ``started_at`` and
  ``worker`` cleared again;
- the claim of a ``retrying`` row (an earlier attempt set ``started_at``) → ``retrying``,
  due at once (``not_before`` stays NULL, as the claim left it: its backoff was due, or it
  could not have been claimed);
- a takeover → ``processing`` of the attempt it took over, its lease released: the lapsed
  lease it took over stays lapsed, and the next delivery takes over at once.

Its lease released, the job's concurrency-key slot is free again. A run that gave its claim
back writes nothing more for it (its attempt number will be claimed again).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import case, null

from ..core.jobs import Claim, JobStatus
from .engines import Applying
from .models import UTCDateTime, jobs
from .statements import HELD, NOW, OWNER, Move, param
from .translate import reconnecting

#: The worker's clock the claim was sent with (the ``now`` of ``claim``).
CLAIMED_AT = param("claimed_at", UTCDateTime)
#: This very claim set ``started_at``: the row was ``pending``. (SET expressions read the
#: row as it was: on MariaDB, which reads earlier assignments, ``status`` and ``worker``
#: come before ``started_at`` in the table.)
_FIRST_START = jobs.c.started_at == CLAIMED_AT
_RESTORED = {
    "attempts_made": jobs.c.attempts_made - 1,
    "locked_by": None,
    "locked_until": None,
    "updated_at": NOW,
}
_MINE = (*HELD, jobs.c.locked_by == OWNER)
_PROCESSING = (JobStatus.PROCESSING,)

GIVE_BACK = Move(
    "give_back",
    _PROCESSING,
    None,  # the status it had: pending or retrying
    {
        **_RESTORED,
        "status": case((_FIRST_START, JobStatus.PENDING.value), else_=JobStatus.RETRYING.value),
        "worker": case((_FIRST_START, null()), else_=jobs.c.worker),
        "started_at": case((_FIRST_START, null()), else_=jobs.c.started_at),
    },
    _MINE,
    "given_back",
)
GIVE_BACK_TAKEOVER = Move(
    "give_back_takeover",
    _PROCESSING,
    JobStatus.PROCESSING,
    _RESTORED,
    _MINE,
    "given_back",
)


class GiveBack(Applying):
    """The give-back side of :class:`~celery_tracked.store.JobStore` (``Moves.apply``)."""

    @reconnecting
    def give_back(
        self, claim: Claim, *, owner: str, claimed_at: datetime, now: datetime, message: str
    ) -> bool:
        """Undo ``claim`` (made by ``owner`` with ``now=claimed_at``) before its body ran:
        False when it no longer holds the job (nothing is changed then)."""
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "owner": owner}
        params.update(claimed_at=claimed_at, now=now, message=message)
        move = GIVE_BACK_TAKEOVER if claim.takeover else GIVE_BACK
        return self.apply(move, params) is not None
