"""Writing what a run amounts to: the fenced outcome writes of a run's claim.

The ``Runner`` (``runner.py``) claims and runs; its ``OutcomeWriter`` plans the body's end
(``plan``) and writes ``completed`` (``complete``), a lease given back (``release``) or a
failed attempt, one :class:`~celery_tracked.core.outcomes.Failure` value (``fail``:
``retrying`` or ``failed``). It never acknowledges a job as done without the write, turns
a write that matched nothing into the right verdict (``lost``: the lease was lost;
``cancelled``: a cancel was requested meanwhile), carries a failure the database refused
over in the message's headers (written first by the next delivery: ``carried_over.py``),
and tells each transition through the ``Teller`` (``teller.py``). Knows nothing of Celery.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from ..core.attempt import Attempt
from ..core.errors import Refused, StoreError, TransactionFailed
from ..core.fences import AttemptError, Completion
from ..core.hooks import Hooks
from ..core.jobs import CLAIMABLE, Claim, Event, JobStatus, NewRow, utcnow
from ..core.messages import HEADER_PENDING_FAILURE, HEADER_PENDING_RETRY, PendingFailure
from ..core.outcomes import (
    BodyEnd,
    Failure,
    Plan,
    Postponed,
    Retrying,
    Skipped,
    Verdict,
    Write,
    after_write,
    exhausted,
    plan_outcome,
    retry_cause,
)
from ..core.ports import OutcomeStore
from ..core.redact import Redaction, error_type
from ..core.retry_policy import Backoff
from ..core.run import Run
from .teller import Teller

logger = logging.getLogger("celery_tracked")


class OutcomeWriter:
    """Writes the outcomes of the runs in this process."""

    #: Pauses between re-sends of a completion whose database connection failed (about
    #: 12 s in all); after the last one the attempt is retried.
    RESEND_PAUSES_S: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 4.0)

    def __init__(
        self,
        store: OutcomeStore,
        hooks: Hooks,
        teller: Teller,
        backoff: Backoff,
        redaction: Redaction,
    ) -> None:
        self.store = store
        self.hooks = hooks
        self.teller = teller
        self.backoff = backoff
        self.redaction = redaction

    def plan(
        self, run: Run, claim: Claim, error: BaseException | None, ran: Attempt | None = None
    ) -> Plan:
        """``plan_outcome`` by ``run``'s policy; ``ran``: what the body's own ``self.retry``
        did in the attempt (``attempt.py``)."""
        plan = plan_outcome(
            error,
            claim.attempt,
            claim.max_attempts,
            partial(self.retry_ms, run),
            run.policy.retries,
            gave_up=ran is not None and ran.gave_up_with(error),
            retry_sent=None if ran is None else ran.retry_sent,
            signals=run.signals,
            refusal=run.policy.refusal,
        )
        if run.inline and plan.delay_ms:  # an inline retry runs now (``eager.py``)
            return replace(plan, delay_ms=0)
        return plan

    def retry_ms(self, run: Run, attempt: int) -> int:
        """The delay after ``run``'s failed attempt ``attempt``, by its task's policy."""
        return self.backoff.retry_ms(run.policy, attempt, run.backoff_base_ms)

    # -- completed ----------------------------------------------------------------------

    def complete(self, attempt: Attempt, plan: Plan, end: BodyEnd) -> Verdict:
        """Write ``completed`` durably, or retry the attempt: never acknowledged as done
        without the write."""
        run, claim = attempt.run, attempt.claim
        try:
            rows = self.hooks.completion_rows(attempt, end.result)
        except Exception as exc:
            attempt.drop_held()
            return self._job_error(attempt, exc, end.started)
        duration = _since(end.started)
        try:
            held, attempt.held = attempt.held, None
            if held is not None:  # the body's own transaction: commits with it, once
                saved = held.complete(claim, Completion(end.result_json, utcnow(), duration, rows))
            else:
                saved = self._save_completion(attempt, end.result_json, duration, rows)
        except Refused as exc:
            return self._job_error(attempt, exc, end.started)
        except TransactionFailed as exc:
            return self._transaction_failed(attempt, exc, end.started)
        except StoreError as exc:  # the database stayed away: the attempt is retried
            return self.fail(attempt, self._unsaved(run, claim, exc), end.started)
        if not saved:
            return self.lost(attempt, "completed", duration)
        attempt.recorded = JobStatus.COMPLETED.value
        note = f" ({plan.note})" if plan.note else ""
        message = f"job {claim.job_id} completed in {duration} ms{note}"
        self.teller.tell_attempt(attempt, Event.COMPLETED, message, duration)
        return after_write(plan, end.error, run.signals, end.result)

    def _save_completion(
        self, attempt: Attempt, result_json: str | None, duration: int, rows: Sequence[NewRow]
    ) -> bool:
        """Send the fenced completion; a connection that failed (a server restart, an idle
        timeout during the body) is replaced and the completion re-sent, a bounded number
        of times with backoff, before the attempt falls back to a retry."""
        claim, resent = attempt.claim, False
        for pause in (*self.RESEND_PAUSES_S, None):
            try:
                done = Completion(result_json, utcnow(), duration, rows)
                return self.store.complete(claim, done, resent)
            except Refused:
                raise
            except StoreError as exc:
                if pause is None:
                    raise
                message = f"job {claim.job_id}: completion not saved ({exc}); re-sent in {pause} s"
                self.teller.tell_attempt(attempt, Event.ERROR, message, duration, logging.WARNING)
                time.sleep(pause)
                resent = True
        raise AssertionError("unreachable")  # pragma: no cover

    def _unsaved(self, run: Run, claim: Claim, exc: StoreError) -> Failure:
        """A completion the database never took: the attempt is retried after its backoff,
        the retry carried over if its write fails too (the body must not run again before
        it is written). The store's error holds no secret value of the call."""
        delay = 0 if run.inline else self.retry_ms(run, claim.attempt)
        summary = self.redaction.summarize(exc)
        verdict = Retrying(delay / 1000, None)
        return Failure(error_type(exc), summary, verdict, retry_ms=delay, carry=True)

    def _job_error(self, attempt: Attempt, error: Exception, started: float) -> Verdict:
        """The completion could not be written for a reason of the job's own (a hook
        raised, the database refused its rows): the attempt fails as if the body had
        raised ``error``, and counts against ``max_attempts``."""
        self.redaction.mask_exception(error, attempt.run.secrets())
        plan = self.plan(attempt.run, attempt.claim, error)
        if plan.write not in (Write.RETRY, Write.FAIL):  # Celery's own signals from a hook
            plan = Plan(Write.FAIL, reraise=True)
        return self.fail(attempt, self.failure(attempt, plan, error), started)

    def _transaction_failed(
        self, attempt: Attempt, error: TransactionFailed, started: float
    ) -> Verdict:
        """The body's own transaction failed before its completion committed (rolled back):
        the attempt failed, whatever the task retries on; retried after its backoff while
        attempts remain, else ``failed``."""
        run, claim = attempt.run, attempt.claim
        if claim.attempt < claim.max_attempts:
            delay = 0 if run.inline else self.retry_ms(run, claim.attempt)
            plan = Plan(Write.RETRY, delay_ms=delay)
        else:
            plan = Plan(Write.FAIL, reraise=True, used_up=True)
        return self.fail(attempt, self.failure(attempt, plan, error), started)

    # -- retrying or failed -------------------------------------------------------------

    def failure(self, attempt: Attempt, plan: Plan, error: Exception) -> Failure:
        """The failed attempt as ``plan`` says to write it (``retrying`` or ``failed``): the
        error a ``Retry`` was for, masked; a failure that exhausted the retries inserts the
        hooks' ``failure_rows`` with it."""
        run, claim = attempt.run, attempt.claim
        used_up = plan.used_up or exhausted(
            error, claim.attempt, claim.max_attempts, run.policy.retries, run.signals
        )
        rows: Sequence[NewRow] = ()
        if plan.delay_ms is None and used_up:
            try:
                rows = self.hooks.failure_rows(attempt, error)
            except Exception:  # the failure is written anyway, without them
                logger.exception("job %s: failure_rows hook failed", claim.job_id)
        cause = retry_cause(error, run.signals)
        summary = self.redaction.summarize(cause, run.secrets())
        verdict = after_write(plan, error, run.signals)
        return Failure(
            error_type(cause),
            summary,
            verdict,
            retry_ms=plan.delay_ms,
            retries_exhausted=used_up,
            rows=rows,
            note=plan.note,
        )

    def fail(self, attempt: Attempt, failure: Failure, started: float) -> Verdict:
        """Write ``failure`` fenced: ``retrying`` or ``failed``. Its verdict once written;
        else the lost lease's, or the failure carried over in the re-published message."""
        claim = attempt.claim
        duration = _since(started)
        ended = AttemptError(failure.error_type, failure.summary, duration, utcnow(), failure.note)
        try:
            if failure.retry_ms is None:
                exhausted = failure.retries_exhausted
                written = self.store.fail(claim, ended, failure.rows, retries_exhausted=exhausted)
            else:
                written = self.store.retrying(claim, ended, failure.retry_ms)
        except StoreError as exc:
            return self._not_written(attempt, failure, duration, exc)
        status = JobStatus.FAILED if failure.final else JobStatus.RETRYING
        if not written:
            return self.lost(attempt, status.value, duration)
        attempt.recorded = status.value
        self.teller.tell_failure(attempt, failure, ended.line(), duration)
        return failure.verdict

    def _not_written(
        self, attempt: Attempt, failure: Failure, duration: int, exc: StoreError
    ) -> Verdict:
        """The database refused ``failure``: the decision must not be lost, nor the body
        run again before it is written. A failure to carry travels in the re-published
        message, whose delivery writes it once the database answers (a retry: then the
        next attempt runs, after its backoff)."""
        claim = attempt.claim
        status = JobStatus.FAILED if failure.final else JobStatus.RETRYING
        message = f"job {claim.job_id}: could not record {status.value}: {exc}"
        self.teller.tell_attempt(attempt, Event.ERROR, message, duration, logging.ERROR)
        if not failure.carried:
            return failure.verdict  # the re-publish that follows makes the next attempt
        pending = PendingFailure(
            claim.attempt,
            failure.error_type,
            failure.summary,
            failure.retries_exhausted,
            failure.retry_ms,
        )
        if failure.final:
            header, noun = HEADER_PENDING_FAILURE, "failure"
        else:
            header, noun = HEADER_PENDING_RETRY, "retry"
        return Postponed(1.0, f"{noun} not recorded", {header: pending.encode()})

    # -- a write that matched nothing, a lease given back --------------------------------

    def lost(self, attempt: Attempt, outcome: str, duration_ms: int) -> Verdict:
        """The fenced write matched nothing: another attempt took over, or (after a database
        crash lost the claim) the row is claimable again and this delivery must retry."""
        claim = attempt.claim
        try:
            job = self.store.get(claim.job_id)
        except StoreError:
            return Postponed(1.0, "cannot tell who holds the job")  # the claim will decide
        held = job is not None and job.attempts_made == claim.attempt
        if held and job is not None and job.cancel_requested_at is not None:
            return self.cancelled(attempt, outcome, duration_ms)
        now = job.status.value if job else "missing"
        message = (
            f"job {claim.job_id} attempt {claim.attempt} no longer holds its lease; "
            f"{outcome} not written (now {now})"
        )
        self.teller.tell_attempt(attempt, Event.LEASE_LOST, message, duration_ms, logging.WARNING)
        if job is not None and job.status in CLAIMABLE:
            return Postponed(0.5, "the job is claimable again")
        return Skipped(f"attempt {claim.attempt} lost its lease")

    def cancelled(self, attempt: Attempt, outcome: str, duration_ms: int) -> Verdict:
        """A cancel was requested while the run held the job (``stopping.py``): the job
        ends ``cancelled`` instead of ``outcome``."""
        claim = attempt.claim
        message = f"cancelled while running (the body ended after the request; {outcome} dropped)"
        try:
            ended = self.store.cancel_run(claim, now=utcnow(), message=message)
        except StoreError as exc:  # the row keeps its request: a redelivery ends it
            return Postponed(1.0, f"cancel not recorded: {exc}")
        if ended:
            attempt.recorded = JobStatus.CANCELLED.value
            said = f"job {claim.job_id} {message}"
            self.teller.tell_attempt(attempt, Event.CANCELLED, said, duration_ms, logging.WARNING)
        return Skipped(f"attempt {claim.attempt} was cancelled while running")

    def release(self, claim: Claim) -> None:
        """Give the lease back, no outcome written (Celery's ``Reject(requeue=True)``: the
        message comes back at once and takes the released lease over)."""
        try:
            self.store.release(claim, utcnow())
        except StoreError as exc:
            logger.warning("job %s: could not release its lease: %s", claim.job_id, exc)


def _since(started: float) -> int:
    """Milliseconds since ``started`` (``time.monotonic()``)."""
    return int((time.monotonic() - started) * 1000)
