"""The worker's claims (``ClaimStore``): a claim and a takeover (each taking the lease),
the failure of a lost last attempt, a claim given back before its body started, the
refresh of a postponed delivery, and the reads of a concurrency key.

Concurrency keys: a job with a concurrency key may be claimed (or taken over) only while
fewer than its task's limit of jobs with that key are ``processing`` under a live lease
(``KEY_FREE`` in ``statements.py``, judged on the database's clock). The slot is the job's
own fenced lease: when a worker dies, its slot frees itself once the lease lapses. Two
claims of one key must not both see a free slot, so a keyed claim runs under the key's
lock (``locks.py``, per dialect).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Integer, bindparam, func, select

from ..core.fences import Lease, Takeover
from ..core.jobs import Claim, JobStatus
from . import transitions as moves
from .apply import Moved
from .engines import Applying
from .models import jobs
from .statements import CONCURRENCY_KEY, HOLDERS, Move
from .translate import reconnecting, translated

#: Is the key full for this job? (read before the rate limiter: a job that cannot claim
#: should not spend a slot; the claim itself decides)
KEY_BUSY = select(bindparam("concurrency_limit", type_=Integer) <= HOLDERS)
#: How many jobs of a key wait for a slot (the partial index on ``(concurrency_key,
#: status)``): a full key's waiting deliveries space their looks by it.
KEY_WAITING = (
    select(func.count())
    .select_from(jobs)
    .where(
        jobs.c.concurrency_key == CONCURRENCY_KEY,
        jobs.c.status.in_([JobStatus.PENDING.value, JobStatus.RETRYING.value]),
    )
)


class Claims(Applying):
    """The claim side of :class:`~celery_tracked.store.JobStore`.

    ``give_back``: a claim given back before its body started (a ``before_body`` hook
    refused the start: the global rate limiter, ``limiter.py``). No body ran, so the
    attempt the claim took is restored and the row returns to the status it had, in one
    conditional ``UPDATE`` fenced by the claim (its attempt and its owner) plus a
    ``given_back`` event:

    - the claim of a ``pending`` row (its claim set ``started_at``: nothing started since
      the job's enqueue or ``Tracker.retry``, which clears it) → ``pending``,
      ``started_at`` and ``worker`` cleared again;
    - the claim of a ``retrying`` row (an earlier attempt set ``started_at``) →
      ``retrying``, due at once (``not_before`` stays NULL, as the claim left it: its
      backoff was due, or it could not have been claimed);
    - a takeover → ``processing`` of the attempt it took over, its lease released: the
      lapsed lease it took over stays lapsed, and the next delivery takes over at once.

    Its lease released, the job's concurrency-key slot is free again. A run that gave its
    claim back writes nothing more for it (its attempt number will be claimed again).
    """

    @reconnecting
    def claim(self, job_id: str, lease: Lease) -> Claim | None:
        """pending | retrying (its backoff due) → processing, taking the lease for
        ``lease.lease_s`` seconds of the database's clock, for a delivery of the job's
        current message ``lease.revision``; with ``lease.concurrency`` (key, limit) only
        while the key has a free slot. None if not claimable."""
        moved = self._lease(moves.CLAIM, moves.CLAIM_KEYED, {"job_id": job_id}, lease)
        return None if moved is None else Claim(job_id, moved[0], moved[1])

    @reconnecting
    def take_over(self, job_id: str, lease: Lease, fence: Takeover) -> Claim | None:
        """processing → processing for a new attempt, when the old lease expired more than
        ``fence.grace_s`` ago (the database's clock) or its owner is known dead. Fenced by
        the attempt number last seen; with ``lease.concurrency`` like ``claim``."""
        params = {"job_id": job_id, "attempt": fence.seen_attempt, "grace_s": fence.grace_s}
        params.update(stale_owner=fence.stale_owner, message=fence.reason)
        moved = self._lease(moves.TAKE_OVER, moves.TAKE_OVER_KEYED, params, lease)
        return None if moved is None else Claim(job_id, moved[0], moved[1], takeover=True)

    def _lease(self, move: Move, keyed: Move, params: dict[str, Any], lease: Lease) -> Moved | None:
        """``move`` taking ``lease`` (``keyed`` under its concurrency key's lock)."""
        params.update(owner=lease.owner, worker_name=lease.worker, now=lease.now)
        params.update(lease_s=lease.lease_s, at_revision=lease.revision)
        key = None
        if lease.concurrency is not None:
            move, key = keyed, lease.concurrency[0]
            params.update(limited_key=key, concurrency_limit=lease.concurrency[1])
        return self.apply(move, params, key=key)

    @reconnecting
    def fail_lost(self, job_id: str, fence: Takeover, now: datetime) -> bool:
        """processing → failed when the last attempt was lost: fenced like a takeover (the
        attempt last seen, and a lease that lapsed or whose owner is dead); ``fence.reason``
        is the history line and the error message."""
        params = {"job_id": job_id, "attempt": fence.seen_attempt, "now": now}
        params.update(message=fence.reason, grace_s=fence.grace_s, stale_owner=fence.stale_owner)
        return self.apply(moves.FAIL_LOST, params) is not None

    @reconnecting
    def give_back(
        self, claim: Claim, *, owner: str, claimed_at: datetime, now: datetime, message: str
    ) -> bool:
        """Undo ``claim`` (made by ``owner`` with ``now=claimed_at``) before its body ran:
        False when it no longer holds the job (nothing is changed then)."""
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "owner": owner}
        params.update(claimed_at=claimed_at, now=now, message=message)
        move = moves.GIVE_BACK_TAKEOVER if claim.takeover else moves.GIVE_BACK
        return self.apply(move, params) is not None

    @reconnecting
    def expire(self, job_id: str, *, now: datetime, message: str) -> bool:
        """pending | retrying → cancelled (``DeadlineExceeded``) once its deadline came on
        the database's clock; False otherwise."""
        params = {"job_id": job_id, "now": now, "message": message}
        return self.apply(moves.EXPIRE, params) is not None

    def republished(self, job_id: str, revision: int, refresh_s: float) -> bool:
        """A postponed delivery of the waiting job's message of ``revision`` handed it to
        the broker again: ``published_at`` is now (the database's clock), if it was
        older than ``refresh_s``."""
        params = {"job_id": job_id, "at_revision": revision, "refresh_s": refresh_s}
        return self.apply(moves.REPUBLISHED, params) is not None

    @reconnecting
    def key_busy(self, job_id: str, key: str, limit: int) -> bool:
        """True when ``limit`` other jobs with ``key`` hold a live lease (a hint read
        before the rate limiter: only the keyed claim decides)."""
        params = {"job_id": job_id, "limited_key": key, "concurrency_limit": limit}
        engines = self.engines.get()
        with translated("reading the concurrency key"):
            if engines.is_postgres and engines.fastpath is not None:
                row = engines.fastpath.execute("key_busy", lambda: KEY_BUSY, params)
            else:
                row = engines.execute(KEY_BUSY, params)
        return bool(row is not None and row[0])

    @reconnecting
    def key_waiting(self, key: str) -> int:
        """How many jobs of ``key`` wait for a slot (pending, retrying)."""
        with translated("reading the concurrency key"):
            row = self.engines.execute(KEY_WAITING, {"limited_key": key})
        return int(row[0]) if row is not None else 0
