"""The worker service: claim under a lease → run the body → classify → verdict.

``Runner.run`` is called from the task's call path (so a failed durable write becomes a
retry, never a silent success) and returns a verdict (``outcomes.py``); it never raises
Celery's exceptions nor calls back into the task class: the body comes in as a callable,
given the running :class:`~celery_tracked.attempt.Attempt`. Writing the outcome is the
``OutcomeWriter``'s (``outcomes.py``), an outcome an earlier attempt carried over
``CarriedOver``'s (``carried_over.py``), telling the hooks each transition the ``Teller``'s
(``teller.py``).

The Runner imports no feature: progress, pipelines, rate limits, metrics are hooks the
wiring (``wiring.py``) composes, and reach the run only through the hook interface
(``hooks.py``), each given the delivery, the claim or the attempt it acts on.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..core.attempt import Attempt
from ..core.codec import encode
from ..core.deadlines import DEADLINE_EXCEEDED, deadline_message, past_deadline
from ..core.errors import StoreError, Unrecoverable
from ..core.fences import DeadRun, Lease, Takeover
from ..core.hooks import Delivery, Hooks, Wait
from ..core.jobs import Claim, Event, Job, JobStatus, utcnow
from ..core.limits import busy_key_countdown
from ..core.outcomes import BodyEnd, Postponed, Skipped, Verdict, Write, after_write, postpone_for
from ..core.ports import RunStore
from ..core.redact import Redaction
from ..core.retry_policy import Backoff
from ..core.run import Run
from ..core.settings import Settings
from .carried_over import CarriedOver
from .lease import LeaseKeeper, diagnose, owner_id, waiting_hold
from .outcomes import OutcomeWriter
from .teller import Teller

logger = logging.getLogger("celery_tracked")

#: Longest wait before re-reading an unreachable database at claim time.
_CLAIM_RETRY_CAP_MS = 30_000

__all__ = ["Runner"]


class Runner:
    """Runs deliveries of tracked jobs in this process."""

    def __init__(
        self, store: RunStore, leases: LeaseKeeper, hooks: Hooks, settings: Settings
    ) -> None:
        self.store = store
        self.leases = leases
        self.hooks = hooks
        self.settings = settings
        self.backoff = Backoff(settings.default_backoff_ms, settings.max_backoff_ms)
        self.teller = Teller(hooks)
        self.outcomes = OutcomeWriter(store, hooks, self.teller, self.backoff, settings.masking)
        self.carried = CarriedOver(store, self.teller, self.backoff)
        #: a waiting job's hand-over is recorded again once older than this: a quarter of
        #: the reaper's patience, so a job whose deliveries keep coming never looks stalled
        limit = min(settings.reaper_pending_seconds, settings.reaper_retrying_seconds)
        self._refresh_s = limit / 4

    def run(self, run: Run, body: Callable[[Attempt], Any]) -> Verdict:
        """Claim ``run``'s job, call ``body(attempt)`` under the lease and record its
        outcome."""
        carried = self.carried.write_first(run)  # an earlier attempt's outcome, first
        if carried is not None:
            return carried
        delivery = Delivery(
            run.job_id, run.job_type, run.queue, run.task_name, run.limits, run.inline
        )
        full = self._key_full(run, hint=True)
        if full is not None:  # before the rate limiter: a job that cannot run spends no slot
            return self._still_waiting(run, full)
        delay = self.hooks.before_claim(delivery)
        if delay is not None:
            asked = delay if isinstance(delay, Wait) else Wait(delay)
            if asked.hold and not run.inline:
                return self._hold(run, asked)
            waiting = Postponed(asked.seconds, asked.reason, asked.headers)
            return self._still_waiting(run, waiting)
        sent, claimed_at = time.monotonic(), utcnow()
        try:
            claim = self._claim(run, claimed_at)
        except StoreError as exc:
            wait = max(0.5, self.backoff.own_wait_ms(_CLAIM_RETRY_CAP_MS) / 1000)
            self.teller.tell(
                run,
                Event.ERROR,
                f"job {run.job_id} not started, database unavailable: {exc}; retry in {wait:.1f} s",
                logging.WARNING,
            )
            return Postponed(wait, "database unavailable")
        if isinstance(claim, Postponed) and claim.waiting:
            return self._still_waiting(run, claim)
        if isinstance(claim, Skipped):
            self.hooks.after_skip(delivery)  # e.g. the rate limiter's turn, given back
        if not isinstance(claim, Claim):
            return self._turned_away(run, claim)
        self.teller.tell(
            run,
            Event.PROCESSING,
            f"job {run.job_id} processing (attempt {claim.attempt}/{claim.max_attempts})",
            attempt=claim.attempt,
        )
        # registered from the claim until the outcome is written: a duplicate delivery in
        # this same process never mistakes the running attempt for an abandoned one
        with self.leases.holding(claim, since=sent):
            refused = self._refused_start(run, claim, delivery, claimed_at)
            if refused is not None:
                return refused
            return self._execute(run, claim, body)

    # -- claim ------------------------------------------------------------------------

    def _claim(self, run: Run, now: datetime) -> Claim | Skipped | Postponed:
        store, job_id = self.store, run.job_id
        keyed, revision = _concurrency(run), run.headers.revision
        who = Lease(owner_id(), run.worker, now, self.leases.lease_seconds, revision, keyed)
        claim = store.claim(job_id, who)
        if claim is not None:
            return claim
        job = store.get(job_id)
        if job is None:
            return Skipped("no such job (its enqueue was undone, or the row was deleted)")
        if job.revision != revision:
            return Skipped(f"a newer message (revision {job.revision}) replaced this one")
        if job.terminal:
            return Skipped(f"job already {job.status.value}")
        if job.status is not JobStatus.PROCESSING:
            db_now = store.clock()
            if past_deadline(job, db_now):  # the claim never starts it late: cancel it
                return self._expire(run, job)
            hold = waiting_hold(job, db_now, keyed=keyed is not None)
            if hold is not None:
                return Postponed(hold.countdown_s, hold.why, waiting=True)
            full = self._key_full(run)
            return replace(full, waiting=True) if full else Postponed(0.2, "claimed concurrently")
        return self._take_over(run, job, who)

    def _expire(self, run: Run, job: Job) -> Skipped:
        """A waiting job whose deadline came: ``cancelled`` (``DeadlineExceeded``), once."""
        message = deadline_message(job)
        if self.store.expire(job.id, now=utcnow(), message=message):
            self.teller.tell(run, Event.CANCELLED, f"job {job.id} {message}")
        return Skipped(message)

    def _take_over(self, run: Run, job: Job, who: Lease) -> Claim | Skipped | Postponed:
        """A ``processing`` row: wait for its live lease, or take a lapsed one over (or
        fail the job when no attempt remains)."""
        store, leases, job_id = self.store, self.leases, run.job_id
        grace, db_now = leases.grace_seconds, store.clock()
        lease = diagnose(job, db_now, leases.dead_holder(job), grace)
        if not lease.lapsed:
            return Postponed(postpone_for(lease.remaining_s, who.lease_s), lease.why)
        seen = job.attempts_made
        if past_deadline(job, db_now):  # no new attempt starts past it
            message = f"attempt {seen} was lost ({lease.why}) and {deadline_message(job)}"
            dead = DeadRun.cancelled(seen, lease.stale_owner, message, who.now, DEADLINE_EXCEEDED)
            if store.end_dead_run(job_id, dead):
                self.teller.tell(run, Event.CANCELLED, f"job {job_id} {message}", attempt=seen)
            return Skipped(message)
        if job.cancel_requested_at is not None:  # asked to stop, and its run is gone
            message = f"cancelled: attempt {seen} was asked to stop and is gone ({lease.why})"
            if store.end_dead_run(
                job_id, DeadRun.cancelled(seen, lease.stale_owner, message, who.now)
            ):
                self.teller.tell(run, Event.CANCELLED, f"job {job_id} {message}", attempt=seen)
            return Skipped(message)
        if seen >= job.max_attempts:
            message = f"attempt {seen} was lost ({lease.why}) and no attempts remain"
            if store.fail_lost(job_id, Takeover(seen, grace, lease.stale_owner, message), who.now):
                self.teller.tell(
                    run, Event.FAILED, f"job {job_id} failed: {message}", logging.ERROR, seen
                )
            return Skipped(message)
        reason = f"attempt {seen} lost ({lease.why}); attempt {seen + 1} takes over"
        taken = store.take_over(job_id, who, Takeover(seen, grace, lease.stale_owner, reason))
        if taken is None:
            return self._key_full(run) or Postponed(0.2, "taken over concurrently")
        return taken

    def _key_full(self, run: Run, hint: bool = False) -> Postponed | None:
        """A keyed job that found no free slot waits (no attempt used); ``hint``: only if a
        read says the key is full now (the keyed claim decides)."""
        keyed = _concurrency(run)
        if keyed is None:
            return None
        if hint:
            try:
                if not self.store.key_busy(run.job_id, *keyed):
                    return None
            except StoreError:  # the claim will meet it and wait
                return None
        try:
            waiting = self.store.key_waiting(keyed[0])
        except StoreError:
            waiting = 1
        return Postponed(
            busy_key_countdown(random.random(), waiting, 3 * self._refresh_s),
            f"concurrency key {keyed[0]!r} has no free slot (limit {keyed[1]})",
        )

    def _hold(self, run: Run, asked: Wait) -> Verdict:
        """A hook asked to hold the waiting job in the database (a pause): its row held
        (``hold``: no message, no attempt used, a ``paused`` event) and this delivery
        acknowledged. A row that cannot be rebuilt from the database (redacted arguments,
        no ``tracked_secret_key``), or cannot be held now, is postponed instead."""
        job_id, revision = run.job_id, run.headers.revision
        if not self.settings.secret_key and run.secrets():
            why = f"{asked.reason} (its redacted arguments are only in its message)"
            return self._still_waiting(run, Postponed(asked.seconds, why, asked.headers))
        message = f"job {job_id} held: {asked.reason}"
        try:
            if self.store.hold(
                job_id, revision, now=utcnow(), message=message, circuit=asked.circuit
            ):
                self.teller.tell(
                    run, Event.CIRCUIT_OPEN if asked.circuit else Event.PAUSED, message
                )
                return Skipped(f"held: {asked.reason}")
            job = self.store.get(job_id)
        except StoreError as exc:
            return self._still_waiting(run, Postponed(asked.seconds, f"not held: {exc}"))
        if job is None or job.terminal or job.revision != revision:
            return self._turned_away(run, Skipped("its job ended, is gone or was re-sent"))
        return self._still_waiting(run, Postponed(asked.seconds, f"{asked.reason} (busy)"))

    def _still_waiting(self, run: Run, postponed: Postponed) -> Verdict:
        """A delivery of a waiting job postponed: its message goes back to the broker, and
        the row says so (``published_at`` now, on the database's clock), so the reaper
        never takes a job waiting its turn for a lost one. Not written, the reaper asks
        the broker and the workers as before."""
        if not run.inline:
            try:
                self.store.republished(run.job_id, run.headers.revision, self._refresh_s)
            except StoreError as exc:
                logger.info("job %s: its postponement not recorded: %s", run.job_id, exc)
        return self._turned_away(run, postponed)

    def _turned_away(self, run: Run, verdict: Skipped | Postponed) -> Verdict:
        if isinstance(verdict, Skipped):
            self.teller.tell(
                run, Event.SKIPPED, f"job {run.job_id} delivery skipped: {verdict.reason}"
            )
        else:
            self.teller.tell(
                run,
                Event.BUSY,
                f"job {run.job_id} delivery postponed {verdict.countdown:.1f} s: {verdict.reason}",
            )
        return verdict

    # -- body and outcome -------------------------------------------------------------

    def _refused_start(
        self, run: Run, claim: Claim, delivery: Delivery, claimed_at: datetime
    ) -> Postponed | None:
        """The last word before the body (``before_body``: the rate limiter's grant). A
        refusal gives the claim back, no attempt used, and postpones the delivery."""
        self.hooks.after_claim(delivery, claim)
        delay = self.hooks.before_body(delivery, claim)
        if delay is None:
            return None  # the body starts now: nothing slow may come in between
        asked = delay if isinstance(delay, Wait) else Wait(delay)
        self.leases.body_ended(claim)  # no body: nothing to stop while it is given back
        try:
            given = self.store.give_back(
                claim, owner=owner_id(), claimed_at=claimed_at, now=utcnow(), message=asked.reason
            )
            note = "claim given back" if given else "the claim was no longer held"
        except StoreError as exc:  # its lease lapses, and a later delivery takes it over
            given, note = False, f"claim not given back: {exc}"
        postponed = Postponed(asked.seconds, f"{asked.reason} ({note})", asked.headers)
        if given:
            self._still_waiting(run, postponed)
        else:
            self._turned_away(run, postponed)
        return postponed

    def _execute(self, run: Run, claim: Claim, body: Callable[[Attempt], Any]) -> Verdict:
        attempt = Attempt(run, claim)
        end = _run_body(attempt, body, self.hooks, self.settings.masking)
        self.leases.body_ended(claim)
        try:
            verdict = self._record(attempt, end)
        finally:
            attempt.drop_held()  # not completed: nothing the body's transaction wrote stays
        self.hooks.after_attempt(attempt)
        return verdict

    def _record(self, attempt: Attempt, end: BodyEnd) -> Verdict:
        """Write what the attempt's body amounts to (``attempt``: what its own
        ``self.retry`` did, too)."""
        outcomes, claim = self.outcomes, attempt.claim
        plan = outcomes.plan(attempt.run, claim, end.error, attempt)
        if plan.write is Write.COMPLETE:
            return outcomes.complete(attempt, plan, end)
        attempt.drop_held()  # first: on SQLite it holds the only write lock
        if plan.write is Write.RELEASE:
            outcomes.release(claim)
            return after_write(plan, end.error, attempt.run.signals)
        assert end.error is not None
        return outcomes.fail(attempt, outcomes.failure(attempt, plan, end.error), end.started)


def _run_body(
    attempt: Attempt, body: Callable[[Attempt], Any], hooks: Hooks, redaction: Redaction
) -> BodyEnd:
    """Call ``body(attempt)`` inside the hooks' ``running`` blocks (they end with it); its
    error masked (and its cause), its result encoded."""
    run, started = attempt.run, time.monotonic()
    try:
        with hooks.running(attempt):
            result = body(attempt)
        return BodyEnd(None, started, result, _encode_result(run.stored_result(result)))
    except Exception as exc:
        redaction.mask_exception(exc, run.secrets())
        return BodyEnd(exc, started)


def _concurrency(run: Run) -> tuple[str, int] | None:
    limits = run.limits
    return None if limits is None or limits.key is None else (limits.key, limits.limit)


def _encode_result(result: Any) -> str | None:
    if result is None:
        return None
    try:
        return encode(result)
    except (TypeError, ValueError) as exc:
        raise Unrecoverable(f"the task's result is not JSON-serialisable: {exc}") from None
