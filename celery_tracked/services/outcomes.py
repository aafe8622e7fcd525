"""Writing what a run amounts to: the fenced outcome writes and the transitions.

The ``Runner`` (``runner.py``) claims and runs; the ``Recorder`` writes ``completed``,
``retrying`` or ``failed`` for the run's claim, never acknowledging a job as done without
the write, turns a write that matched nothing into the right verdict (the lease was lost),
and tells the hooks every transition. Knows nothing of Celery.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from ..core.attempt import Attempt
from ..core.errors import Refused, StoreError, TransactionFailed
from ..core.hooks import Hooks, Transition
from ..core.jobs import CLAIMABLE, Claim, Event, JobStatus, NewRow, utcnow
from ..core.messages import HEADER_PENDING_FAILURE, HEADER_PENDING_RETRY, PendingFailure
from ..core.moves import AttemptError, Completion
from ..core.outcome import (
    Completed,
    Failed,
    PassedOn,
    Plan,
    Postponed,
    Retrying,
    Signals,
    Skipped,
    Verdict,
    Write,
    exhausted,
    final_error,
    plan_outcome,
    retry_cause,
)
from ..core.ports import OutcomeStore
from ..core.redact import error_type, mask_exception, summarize
from ..core.retry_policy import RetryPolicy
from ..core.run import Run
from ..core.settings import Settings
from .carried_over import LateOutcomes

#: The policy of the library's own waits (not a task's retries).
_OWN_WAITS = RetryPolicy()


class Recorder:
    """Writes the outcomes of runs in this process and tells the hooks."""

    #: Pauses between re-sends of a completion whose database connection failed (about
    #: 12 s in all); after the last one the attempt is retried.
    RESEND_PAUSES_S: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 4.0)

    def __init__(self, store: OutcomeStore, hooks: Hooks, settings: Settings) -> None:
        self.store = store
        self.hooks = hooks
        self.settings = settings
        self.late = LateOutcomes(
            store, self.tell, partial(self.backoff, 1, settings.default_backoff_ms)
        )

    def carried_over(self, run: Run) -> Verdict | None:
        """Write first the outcome an earlier attempt decided but could not save (its
        headers carry it: ``late.py``). None: the delivery goes on and claims."""
        if run.headers.pending_failure is not None:
            return self.late.record_pending_failure(run, run.headers.pending_failure)
        if run.headers.pending_retry is not None:  # record it first, then claim as usual
            return self.late.record_pending_retry(run, run.headers.pending_retry)
        return None

    def plan(
        self, run: Run, claim: Claim, error: BaseException | None, ran: Attempt | None = None
    ) -> Plan:
        """``plan_outcome`` by ``run``'s policy; ``ran``: what the body's own ``self.retry``
        did in the attempt (``attempt.py``)."""
        plan = plan_outcome(
            error,
            claim.attempt,
            claim.max_attempts,
            partial(self.delay, run),
            run.policy.retries,
            gave_up=ran is not None and ran.gave_up_with(error),
            retry_sent=None if ran is None else ran.retry_sent,
            signals=run.signals,
        )
        if run.inline and plan.delay_ms:  # an inline retry runs now (``eager.py``)
            return replace(plan, delay_ms=0)
        return plan

    def complete(
        self,
        attempt: Attempt,
        plan: Plan,
        error: Exception | None,
        result: Any,
        result_json: str | None,
        started: float,
    ) -> Verdict:
        """Write ``completed`` durably, or retry the attempt: never acknowledged as done
        without the write."""
        run, claim = attempt.run, attempt.claim
        try:
            rows = self.hooks.completion_rows(attempt, result)
        except Exception as exc:
            attempt.drop_held()
            return self.job_error(attempt, exc, started)
        duration = int((time.monotonic() - started) * 1000)
        try:
            held, attempt.held = attempt.held, None
            if held is not None:  # the body's own transaction: commits with it, once
                saved = held.complete(claim, Completion(result_json, utcnow(), duration, rows))
            else:
                saved = self._save_completion(run, claim, result_json, duration, rows)
        except Refused as exc:
            return self.job_error(attempt, exc, started)
        except TransactionFailed as exc:
            return self.transaction_failed(attempt, exc, started)
        except StoreError as exc:  # the database stayed away: the attempt is retried
            delay = 0 if run.inline else self.delay(run, claim.attempt)
            lost = self.record_failure(attempt, exc, started, delay, secret=False, carry=True)
            return lost if lost is not None else Retrying(delay / 1000, None)
        if not saved:
            return self.lost(run, claim, "completed", duration)
        attempt.recorded = JobStatus.COMPLETED.value
        note = f" ({plan.note})" if plan.note else ""
        self.tell(
            run,
            Event.COMPLETED,
            f"job {claim.job_id} completed in {duration} ms{note}",
            attempt=claim.attempt,
            duration_ms=duration,
        )
        return after_write(plan, error, run.signals, result)

    def _save_completion(
        self,
        run: Run,
        claim: Claim,
        result_json: str | None,
        duration: int,
        rows: Sequence[NewRow],
    ) -> bool:
        """Send the fenced completion; a connection that failed (a server restart, an idle
        timeout during the body) is replaced and the completion re-sent, a bounded number
        of times with backoff, before the attempt falls back to a retry."""
        resent = False
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
                self.tell(run, Event.ERROR, message, logging.WARNING, claim.attempt, duration)
                time.sleep(pause)
                resent = True
        raise AssertionError("unreachable")  # pragma: no cover

    def fail_attempt(
        self, attempt: Attempt, plan: Plan, error: Exception, started: float
    ) -> Verdict:
        """Record the attempt as failed (``retrying`` or ``failed``, as ``plan`` says); a
        failure that exhausted the retries inserts the hooks' ``failure_rows`` with it."""
        run, claim = attempt.run, attempt.claim
        rows: Sequence[NewRow] = ()
        used_up = plan.used_up or exhausted(
            error, claim.attempt, claim.max_attempts, run.policy.retries, run.signals
        )
        if plan.delay_ms is None and used_up:
            try:
                rows = self.hooks.failure_rows(attempt, error)
            except Exception:  # the failure is written anyway, without them
                logging.getLogger("celery_tracked").exception(
                    "job %s: failure_rows hook failed", claim.job_id
                )
        cause = retry_cause(error, run.signals)
        written = self.record_failure(
            attempt, cause, started, plan.delay_ms, rows=rows, used_up=used_up
        )
        return written if written is not None else after_write(plan, error, run.signals)

    def job_error(self, attempt: Attempt, error: Exception, started: float) -> Verdict:
        """The completion could not be written for a reason of the job's own (a hook
        raised, the database refused its rows): the attempt fails as if the body had
        raised ``error``, and counts against ``max_attempts``."""
        mask_exception(error, attempt.run.secrets(), self.settings.redact_keys)
        plan = self.plan(attempt.run, attempt.claim, error)
        if plan.write not in (Write.RETRY, Write.FAIL):  # Celery's own signals from a hook
            plan = Plan(Write.FAIL, reraise=True)
        return self.fail_attempt(attempt, plan, error, started)

    def transaction_failed(
        self, attempt: Attempt, error: TransactionFailed, started: float
    ) -> Verdict:
        """The body's own transaction failed before its completion committed (rolled back):
        the attempt failed, whatever the task retries on; retried after its backoff while
        attempts remain, else ``failed``."""
        run, claim = attempt.run, attempt.claim
        if claim.attempt < claim.max_attempts:
            delay = 0 if run.inline else self.delay(run, claim.attempt)
            plan = Plan(Write.RETRY, delay_ms=delay)
        else:
            plan = Plan(Write.FAIL, reraise=True, used_up=True)
        return self.fail_attempt(attempt, plan, error, started)

    def record_failure(
        self,
        attempt: Attempt,
        exc: BaseException,
        started: float,
        delay_ms: int | None,
        secret: bool = True,
        rows: Sequence[NewRow] = (),
        used_up: bool = False,
        carry: bool = False,
    ) -> Verdict | None:
        """Write retrying (``delay_ms`` given) or failed, fenced. None when written; else
        the verdict that replaces the plan's (lease lost, or the failure to carry over: a
        final one always, a retry when ``carry`` says so)."""
        run, claim = attempt.run, attempt.claim
        keys = self.settings.redact_keys
        kind = error_type(exc)
        summary = summarize(exc, run.secrets() if secret else (), keys)
        duration = int((time.monotonic() - started) * 1000)
        status = JobStatus.FAILED if delay_ms is None else JobStatus.RETRYING
        try:
            ended = AttemptError(kind, summary, duration, utcnow())
            if delay_ms is None:
                written = self.store.fail(claim, ended, rows, retries_exhausted=used_up)
            else:
                written = self.store.retrying(claim, ended, delay_ms)
        except StoreError as store_exc:
            message = f"job {claim.job_id}: could not record {status.value}: {store_exc}"
            self.tell(run, Event.ERROR, message, logging.ERROR, claim.attempt, duration)
            if delay_ms is not None and not carry:
                return None  # the re-publish that follows makes the next attempt anyway
            # the decision must not be lost, nor the body run again before it is written:
            # the re-published message carries it, and its delivery records it once the
            # database answers (a retry: then the next attempt runs, after its backoff)
            failure = PendingFailure(claim.attempt, kind, summary, used_up, delay_ms)
            if delay_ms is None:
                header, noun = HEADER_PENDING_FAILURE, "failure"
            else:
                header, noun = HEADER_PENDING_RETRY, "retry"
            return Postponed(1.0, f"{noun} not recorded", {header: failure.encode()})
        if not written:
            return self.lost(run, claim, status.value, duration)
        attempt.recorded = status.value
        tail = "" if delay_ms is None else f"; retry in {delay_ms} ms"
        self.tell(
            run,
            Event(status.value),
            f"job {claim.job_id} {status.value} after attempt {claim.attempt}/"
            f"{claim.max_attempts}: {kind}: {summary}{tail}",
            logging.ERROR if delay_ms is None else logging.WARNING,
            claim.attempt,
            duration,
        )
        return None

    def lost(self, run: Run, claim: Claim, outcome: str, duration_ms: int) -> Verdict:
        """The fenced write matched nothing: another attempt took over, or (after a database
        crash lost the claim) the row is claimable again and this delivery must retry."""
        try:
            job = self.store.get(claim.job_id)
        except StoreError:
            return Postponed(1.0, "cannot tell who holds the job")  # the claim will decide
        held = job is not None and job.attempts_made == claim.attempt
        if held and job is not None and job.cancel_requested_at is not None:
            return self.cancelled(run, claim, outcome, duration_ms)
        now = job.status.value if job else "missing"
        self.tell(
            run,
            Event.LEASE_LOST,
            f"job {claim.job_id} attempt {claim.attempt} no longer holds its lease; "
            f"{outcome} not written (now {now})",
            logging.WARNING,
            claim.attempt,
            duration_ms,
        )
        if job is not None and job.status in CLAIMABLE:
            return Postponed(0.5, "the job is claimable again")
        return Skipped(f"attempt {claim.attempt} lost its lease")

    def cancelled(self, run: Run, claim: Claim, outcome: str, duration_ms: int) -> Verdict:
        """A cancel was requested while the run held the job (``stopping.py``): the job
        ends ``cancelled`` instead of ``outcome``."""
        message = f"cancelled while running (the body ended after the request; {outcome} dropped)"
        try:
            ended = self.store.cancel_run(claim, now=utcnow(), message=message)
        except StoreError as exc:  # the row keeps its request: a redelivery ends it
            return Postponed(1.0, f"cancel not recorded: {exc}")
        if ended:
            self.tell(
                run,
                Event.CANCELLED,
                f"job {claim.job_id} {message}",
                logging.WARNING,
                claim.attempt,
                duration_ms,
            )
        return Skipped(f"attempt {claim.attempt} was cancelled while running")

    def release(self, claim: Claim) -> None:
        try:
            self.store.release(claim, utcnow())
        except StoreError as exc:
            logging.getLogger("celery_tracked").warning(
                "job %s: could not release its lease: %s", claim.job_id, exc
            )

    def delay(self, run: Run, attempt: int) -> int:
        """The delay after ``run``'s failed attempt ``attempt``, by its task's policy."""
        cap = self.settings.max_backoff_ms
        return run.policy.delay_ms(attempt, run.backoff_base_ms, cap, random.random)

    def backoff(self, attempt: int, base_ms: int, cap_ms: int | None = None) -> int:
        """A wait of the library's own (the database is unavailable): the default policy."""
        cap = self.settings.max_backoff_ms if cap_ms is None else cap_ms
        return _OWN_WAITS.delay_ms(attempt, base_ms, cap, random.random)

    def tell(
        self,
        run: Run,
        event: Event,
        message: str,
        level: int = logging.INFO,
        attempt: int | None = None,
        duration_ms: int | None = None,
    ) -> None:
        self.hooks.after_transition(
            Transition.of(
                event,
                run.job_id,
                message,
                queue=run.queue,
                job_type=run.job_type,
                attempt=attempt,
                duration_ms=duration_ms,
                level=level,
            )
        )


def after_write(
    plan: Plan, error: Exception | None, signals: Signals, result: Any = None
) -> Verdict:
    """The verdict once the plan's write is done (``signals``: which errors are control
    signals, for the error a final failure raises)."""
    if error is None:
        return Completed(result)
    if not plan.reraise:
        return Retrying((plan.delay_ms or 0) / 1000, error)
    if plan.write is Write.FAIL:
        return Failed(final_error(error, signals))
    return PassedOn(error)
