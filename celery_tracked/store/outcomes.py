"""How a run ends: the moves out of ``processing`` (completed, retrying, failed) for a run
that reports its own outcome, fenced by its claim, and for a run that died outside its call
path (a lost last attempt, the hard time limit, ``revoke(terminate=True)``), fenced like a
takeover; the end of a run asked to stop (``cancel_run``), the renewal and the release of a
run's lease. ``rows`` given with an outcome (successors) are inserted in its transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..core.fences import AttemptError, Completion, DeadRun, Rows
from ..core.jobs import Claim, JobStatus, NewRow
from . import selects
from . import transitions as moves
from .engines import Applying
from .statements import Move
from .translate import reconnecting, translated


class Outcomes(Applying):
    """The outcome side of :class:`~celery_tracked.store.JobStore` (``Apply.apply``)."""

    @reconnecting
    def end_dead_run(self, job_id: str, dead: DeadRun) -> bool:
        """processing → retrying | failed | cancelled for a run that died outside its call
        path (hard time limit, ``revoke(terminate=True)``), fenced to that run: the attempt
        last seen, and a lease that lapsed or whose owner (``dead.stale_owner``) is dead.
        ``dead.message`` is the history line (and a cancellation's ``error_message``); a
        retry is not claimable before ``dead.delay_ms``."""
        move = {
            JobStatus.RETRYING: moves.RETRY_DEAD,
            JobStatus.FAILED: moves.FAIL_DEAD,
            JobStatus.CANCELLED: moves.CANCEL_DEAD,
        }[dead.status]
        params = {"job_id": job_id, "attempt": dead.seen_attempt, "now": dead.now}
        params.update(message=dead.message, stale_owner=dead.stale_owner)
        params.update(error_type=dead.error_type, error_message=dead.error_message)
        params.update(grace_s=0.0, delay_s=dead.delay_ms / 1000)
        return self.apply(move, params) is not None

    def complete(self, claim: Claim, done: Completion, resent: bool = False) -> bool:
        """processing → completed, fenced by the claim; ``done.rows`` are inserted in the
        same transaction. False when the run no longer holds the lease.

        ``resent``: an earlier send failed with its connection; if this one matches
        nothing because that send had committed (the row is completed by this very
        attempt), the completion is saved.
        """
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "now": done.now}
        params.update(result_json=done.result_json, duration_ms=done.duration_ms)
        if self.apply(moves.COMPLETE, params, done.rows) is not None:
            return True
        if not resent:
            return False
        with translated("reading the job"):
            row = self.engines.execute(selects.SELECT_ATTEMPTS_STATUS, {"job_id": claim.job_id})
        return row is not None and tuple(row) == (claim.attempt, JobStatus.COMPLETED.value)

    @reconnecting
    def retrying(self, claim: Claim, error: AttemptError, delay_ms: int) -> bool:
        """processing → retrying after a failed attempt, fenced by the claim; not claimable
        before ``delay_ms``."""
        message = f"retry in {delay_ms} ms after {error.error_type}: {error.error_message}"
        return self._end_run(moves.RETRYING, claim, error, message, {"delay_s": delay_ms / 1000})

    @reconnecting
    def fail(
        self, claim: Claim, error: AttemptError, rows: Rows = (), retries_exhausted: bool = False
    ) -> bool:
        """processing → failed, fenced by the claim; ``retries_exhausted``: its last attempt
        failed (else it was stopped); ``rows`` (a fail-soft successor) are inserted in the
        same transaction."""
        message = error.line()
        extra = {"delay_s": 0.0, "retries_exhausted": retries_exhausted}
        return self._end_run(moves.FAIL, claim, error, message, extra, rows)

    def _end_run(
        self,
        move: Move,
        claim: Claim,
        error: AttemptError,
        message: str,
        extra: Mapping[str, Any],
        rows: Sequence[NewRow] = (),
    ) -> bool:
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "now": error.now}
        params.update(error_type=error.error_type, error_message=error.error_message)
        params.update(message=message[:1000], duration_ms=error.duration_ms, **extra)
        return self.apply(move, params, rows) is not None

    @reconnecting
    def cancel_run(self, claim: Claim, *, now: datetime, message: str) -> bool:
        """End the run of ``claim`` as ``cancelled`` if a cancel was requested while it
        still holds the job; False otherwise."""
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "now": now}
        return self.apply(moves.CANCEL_RUN, {**params, "message": message}) is not None

    @reconnecting
    def renew(self, claim: Claim, lease_seconds: float) -> bool:
        """Extend a running attempt's lease to ``lease_seconds`` from now (the database's
        clock); False when it no longer holds it."""
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "lease_s": lease_seconds}
        return self.apply(moves.RENEW, params) is not None

    @reconnecting
    def release(self, claim: Claim, now: datetime) -> bool:
        """Drop the lease of an abandoned attempt, so a redelivery takes over at once."""
        params = {"job_id": claim.job_id, "attempt": claim.attempt, "now": now}
        return self.apply(moves.RELEASE, params) is not None
