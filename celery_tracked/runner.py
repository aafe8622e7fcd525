"""The worker service: claim under a lease → run the body → classify → write → verdict.

``Runner.run`` is called from the task's call path (so a failed durable write becomes a
retry, never a silent success) and returns a verdict (``outcome.py``); it never raises
Celery's exceptions nor calls back into the task class: the body comes in as a callable.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from .errors import StoreError, Unrecoverable, error_type, mask_exception, summarize
from .hooks import Delivery, Hooks, Transition
from .jobs import CLAIMABLE, Claim, JobStatus, utcnow
from .lease import LeaseKeeper, diagnose, owner_id
from .messages import HEADER_PENDING_FAILURE, PendingFailure, TrackedHeaders
from .outcome import (
    Completed,
    Failed,
    PassedOn,
    Plan,
    Postponed,
    Retrying,
    Skipped,
    Verdict,
    Write,
    backoff_ms,
    plan_outcome,
    postpone_for,
    retry_cause,
)
from .settings import Settings
from .store import JobStore, Refused

#: Longest wait before re-reading an unreachable database at claim time.
_CLAIM_RETRY_CAP_MS = 30_000


@dataclass(frozen=True)
class Run:
    """One delivery of a tracked message to this worker."""

    headers: TrackedHeaders
    task_name: str
    job_type: str
    queue: str
    worker: str
    backoff_base_ms: int
    #: the call's secret values (computed only when an error must be masked)
    secrets: Callable[[], Sequence[str]]

    @property
    def job_id(self) -> str:
        return self.headers.job_id


class Runner:
    """Runs deliveries of tracked jobs in this process."""

    def __init__(
        self, store: JobStore, leases: LeaseKeeper, hooks: Hooks, settings: Settings
    ) -> None:
        self.store = store
        self.leases = leases
        self.hooks = hooks
        self.settings = settings

    def run(self, run: Run, body: Callable[[], Any]) -> Verdict:
        """Claim ``run``'s job, call ``body`` under the lease and record its outcome."""
        if run.headers.pending_failure is not None:
            return self._record_pending_failure(run, run.headers.pending_failure)
        delay = self.hooks.before_claim(
            Delivery(run.job_id, run.job_type, run.queue, run.task_name)
        )
        if delay is not None:
            return self._turned_away(run, Postponed(delay, "a hook asked to wait"))
        try:
            claim = self._claim(run)
        except StoreError as exc:
            wait = max(
                0.5, self._backoff(1, self.settings.default_backoff_ms, _CLAIM_RETRY_CAP_MS) / 1000
            )
            self._tell(
                run,
                "error",
                f"job {run.job_id} not started, database unavailable: {exc}; retry in {wait:.1f} s",
                level=logging.WARNING,
            )
            return Postponed(wait, "database unavailable")
        if not isinstance(claim, Claim):
            return self._turned_away(run, claim)
        self._tell(
            run,
            "processing",
            f"job {run.job_id} processing (attempt {claim.attempt}/{claim.max_attempts})",
            attempt=claim.attempt,
        )
        # registered from the claim until the outcome is written: a duplicate delivery in
        # this same process never mistakes the running attempt for an abandoned one
        with self.leases.holding(claim):
            return self._execute(run, claim, body)

    # -- claim ------------------------------------------------------------------------

    def _claim(self, run: Run) -> Claim | Skipped | Postponed:
        store, job_id = self.store, run.job_id
        now, until = utcnow(), self.leases.lease_until()
        claim = store.claim(job_id, owner=owner_id(), worker=run.worker, now=now, until=until)
        if claim is not None:
            return claim
        job = store.get(job_id)
        if job is None:
            return Skipped("no such job (its enqueue was undone, or the row was deleted)")
        if job.terminal:
            return Skipped(f"job already {job.status.value}")
        if job.status is not JobStatus.PROCESSING:
            return Postponed(0.2, "claimed concurrently")
        lease = diagnose(job, now, self.leases.dead_holder(job))
        if not lease.lapsed:
            return Postponed(
                postpone_for(lease.remaining_s, self.settings.lease_seconds), lease.why
            )
        seen = job.attempts_made
        if seen >= job.max_attempts:
            message = f"attempt {seen} was lost ({lease.why}) and no attempts remain"
            if store.fail_lost(
                job_id, seen_attempt=seen, now=now, stale_owner=lease.stale_owner, message=message
            ):
                self._tell(run, "failed", f"job {job_id} failed: {message}", logging.ERROR, seen)
            return Skipped(message)
        taken = store.take_over(
            job_id,
            seen_attempt=seen,
            owner=owner_id(),
            worker=run.worker,
            now=now,
            until=until,
            stale_owner=lease.stale_owner,
            reason=f"attempt {seen} lost ({lease.why}); attempt {seen + 1} takes over",
        )
        return taken if taken is not None else Postponed(0.2, "taken over concurrently")

    def _turned_away(self, run: Run, verdict: Skipped | Postponed) -> Verdict:
        if isinstance(verdict, Skipped):
            self._tell(run, "skipped", f"job {run.job_id} delivery skipped: {verdict.reason}")
        else:
            self._tell(
                run,
                "busy",
                f"job {run.job_id} delivery postponed {verdict.countdown:.1f} s: {verdict.reason}",
            )
        return verdict

    # -- body and outcome -------------------------------------------------------------

    def _execute(self, run: Run, claim: Claim, body: Callable[[], Any]) -> Verdict:
        started = time.monotonic()
        error: Exception | None = None
        result: Any = None
        result_json: str | None = None
        try:
            result = body()
            result_json = _encode_result(result)
        except Exception as exc:
            error = exc
            mask_exception(exc, run.secrets(), self.settings.redact_keys)  # and its cause
        plan = self._plan(run, claim, error)
        if plan.write is Write.COMPLETE:
            return self._complete(run, claim, plan, error, result, result_json, started)
        if plan.write is Write.RELEASE:
            self._release(claim)
            return _after_write(plan, error)
        assert error is not None
        return self._fail_attempt(run, claim, plan, error, started)

    def _plan(self, run: Run, claim: Claim, error: BaseException | None) -> Plan:
        base = run.backoff_base_ms
        return plan_outcome(
            error, claim.attempt, claim.max_attempts, lambda n: self._backoff(n, base)
        )

    def _fail_attempt(
        self, run: Run, claim: Claim, plan: Plan, error: Exception, started: float
    ) -> Verdict:
        """Record the attempt as failed (``retrying`` or ``failed``, as ``plan`` says)."""
        written = self._record_failure(run, claim, retry_cause(error), started, plan.delay_ms)
        return written if written is not None else _after_write(plan, error)

    def _job_error(self, run: Run, claim: Claim, error: Exception, started: float) -> Verdict:
        """The completion could not be written for a reason of the job's own (a hook
        raised, the database refused its rows): the attempt fails as if the body had
        raised ``error``, and counts against ``max_attempts``."""
        mask_exception(error, run.secrets(), self.settings.redact_keys)
        plan = self._plan(run, claim, error)
        if plan.write not in (Write.RETRY, Write.FAIL):  # Celery's own signals from a hook
            plan = Plan(Write.FAIL, reraise=True)
        return self._fail_attempt(run, claim, plan, error, started)

    def _complete(
        self,
        run: Run,
        claim: Claim,
        plan: Plan,
        error: Exception | None,
        result: Any,
        result_json: str | None,
        started: float,
    ) -> Verdict:
        """Write ``completed`` durably, or retry the attempt: never acknowledged as done
        without the write."""
        try:
            rows = self.hooks.completion_rows(claim, result)
        except Exception as exc:
            return self._job_error(run, claim, exc, started)
        duration = int((time.monotonic() - started) * 1000)
        try:
            saved = self.store.complete(
                claim, result_json=result_json, now=utcnow(), duration_ms=duration, rows=rows
            )
        except Refused as exc:
            return self._job_error(run, claim, exc, started)
        except StoreError as exc:
            delay = self._backoff(claim.attempt, run.backoff_base_ms)
            lost = self._record_failure(run, claim, exc, started, delay, secret=False)
            return lost if lost is not None else Retrying(delay / 1000, None)
        if not saved:
            return self._lost(run, claim, "completed", duration)
        note = f" ({plan.note})" if plan.note else ""
        self._tell(
            run,
            "completed",
            f"job {claim.job_id} completed in {duration} ms{note}",
            attempt=claim.attempt,
            duration_ms=duration,
        )
        return _after_write(plan, error, result)

    def _record_failure(
        self,
        run: Run,
        claim: Claim,
        exc: BaseException,
        started: float,
        delay_ms: int | None,
        secret: bool = True,
    ) -> Verdict | None:
        """Write retrying (``delay_ms`` given) or failed, fenced. None when written; else
        the verdict that replaces the plan's (lease lost, or the failure to carry over)."""
        keys = self.settings.redact_keys
        kind = error_type(exc)
        summary = summarize(exc, run.secrets() if secret else (), keys)
        duration = int((time.monotonic() - started) * 1000)
        status = JobStatus.FAILED if delay_ms is None else JobStatus.RETRYING
        write = (
            self.store.fail if delay_ms is None else partial(self.store.retrying, delay_ms=delay_ms)
        )
        try:
            written = write(
                claim, error_type=kind, error_message=summary, duration_ms=duration, now=utcnow()
            )
        except StoreError as store_exc:
            message = f"job {claim.job_id}: could not record {status.value}: {store_exc}"
            self._tell(run, "error", message, logging.ERROR, claim.attempt, duration)
            if delay_ms is not None:
                return None  # the re-publish that follows makes the next attempt anyway
            # the decision must not be lost, nor the body run again: the re-published
            # message carries it, and its delivery records it once the database answers
            failure = PendingFailure(claim.attempt, kind, summary)
            return Postponed(
                1.0, "failure not recorded", {HEADER_PENDING_FAILURE: failure.encode()}
            )
        if not written:
            return self._lost(run, claim, status.value, duration)
        tail = "" if delay_ms is None else f"; retry in {delay_ms} ms"
        self._tell(
            run,
            status.value,
            f"job {claim.job_id} {status.value} after attempt {claim.attempt}/"
            f"{claim.max_attempts}: {kind}: {summary}{tail}",
            logging.ERROR if delay_ms is None else logging.WARNING,
            claim.attempt,
            duration,
        )
        return None

    def _record_pending_failure(self, run: Run, failure: PendingFailure) -> Verdict:
        """Write the failure an earlier attempt decided but could not save; no body runs."""
        attempt = failure.attempt
        try:
            written = self.store.fail(
                Claim(run.job_id, attempt, attempt),
                error_type=failure.error_type,
                error_message=failure.error_message,
                duration_ms=None,
                now=utcnow(),
            )
        except StoreError as exc:
            logging.getLogger("celery_tracked").warning(
                "job %s: failure still not recorded: %s", run.job_id, exc
            )
            wait = self._backoff(1, self.settings.default_backoff_ms) / 1000
            return Postponed(max(0.5, wait), "failure still not recorded")
        if written:
            self._tell(
                run,
                "failed",
                f"job {run.job_id} failed after attempt {attempt}: {failure.error_type}: "
                f"{failure.error_message} (recorded late)",
                logging.ERROR,
                attempt,
            )
        return Skipped("failure recorded late")

    def _lost(self, run: Run, claim: Claim, outcome: str, duration_ms: int) -> Verdict:
        """The fenced write matched nothing: another attempt took over, or (after a database
        crash lost the claim) the row is claimable again and this delivery must retry."""
        try:
            job = self.store.get(claim.job_id)
        except StoreError:
            return Postponed(1.0, "cannot tell who holds the job")  # the claim will decide
        now = job.status.value if job else "missing"
        self._tell(
            run,
            "lease_lost",
            f"job {claim.job_id} attempt {claim.attempt} no longer holds its lease; "
            f"{outcome} not written (now {now})",
            logging.WARNING,
            claim.attempt,
            duration_ms,
        )
        if job is not None and job.status in CLAIMABLE:
            return Postponed(0.5, "the job is claimable again")
        return Skipped(f"attempt {claim.attempt} lost its lease")

    def _release(self, claim: Claim) -> None:
        try:
            self.store.release(claim, utcnow())
        except StoreError as exc:
            logging.getLogger("celery_tracked").warning(
                "job %s: could not release its lease: %s", claim.job_id, exc
            )

    # -- helpers ----------------------------------------------------------------------

    def _backoff(self, attempt: int, base_ms: int, cap_ms: int | None = None) -> int:
        cap = self.settings.max_backoff_ms if cap_ms is None else cap_ms
        return backoff_ms(attempt, base_ms, cap, random.random)

    def _tell(
        self,
        run: Run,
        event: str,
        message: str,
        level: int = logging.INFO,
        attempt: int | None = None,
        duration_ms: int | None = None,
    ) -> None:
        self.hooks.after_transition(
            Transition(
                run.job_id,
                event,
                event,
                message,
                run.queue,
                run.job_type,
                attempt,
                duration_ms,
                level,
            )
        )


def _after_write(plan: Plan, error: Exception | None, result: Any = None) -> Verdict:
    """The verdict once the plan's write is done."""
    if error is None:
        return Completed(result)
    if not plan.reraise:
        return Retrying((plan.delay_ms or 0) / 1000, error)
    if plan.write is Write.FAIL:
        return Failed(error)
    return PassedOn(error)


def _encode_result(result: Any) -> str | None:
    if result is None:
        return None
    try:
        return json.dumps(result, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise Unrecoverable(f"the task's result is not JSON-serialisable: {exc}") from None
