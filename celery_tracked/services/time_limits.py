"""Runs that died outside the task's call path, ended from the worker's main process.

Celery kills a pool child for a hard ``time_limit`` (then calls the task's ``on_failure``
in the worker's main process) and for ``revoke(terminate=True)`` (``task_revoked`` with
``terminated=True``, main process too). The killed run wrote nothing and its message is
acknowledged: the row would stay ``processing`` with no message left. ``TimeLimits`` waits,
in a thread and for a bounded time, until the lease holder is dead, then ends the run with
one move fenced to it (the attempt last seen and the dead owner), so a run that moved on
(a takeover, another worker) is never touched:

- time limit: ``retrying`` and the message published again after the task's retry delay
  (its policy, as for any failed attempt) while attempts remain and the task retries a
  killed run (``delay`` gives None when it does not: Celery's retry semantics without
  ``autoretry_for`` covering it, as plain Celery fails it), else ``failed`` with
  ``error_type = "TimeLimitExceeded"``;
- terminated: ``cancelled``.

Knows nothing of Celery: the re-publish and the task's retry delay come in as callables.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from ..core.errors import StoreError
from ..core.hooks import Hooks, Transition
from ..core.jobs import Event, Job, JobStatus, utcnow
from ..core.moves import DeadRun
from ..core.ports import DeadRunStore
from ..core.redact import safe_text
from ..core.settings import Settings
from .lease import HOST_ID, dead_holder, process_alive

logger = logging.getLogger("celery_tracked")

#: ``republish(job, countdown_s)``: deliver the job's message again after ``countdown_s``.
Republish = Callable[[Job, float], None]
#: ``delay(attempt)``: the task's retry delay after failed attempt ``attempt``, in ms.
Delay = Callable[[int], int | None]
#: Longest wait for a killed run's process to be gone.
DEATH_WAIT_S = 30.0
_POLL_S = 0.1


class TimeLimits:
    """Ends the runs of this worker's pool that Celery killed (a hard time limit, a
    terminating revoke)."""

    def __init__(self, store: DeadRunStore, hooks: Hooks, settings: Settings) -> None:
        self.store = store
        self.hooks = hooks
        self.settings = settings

    def time_limited(self, job_id: str, limit: object, delay: Delay, republish: Republish) -> None:
        """The hard time limit killed ``job_id``'s run: retry it after ``delay(attempt)``
        ms, or fail it (in a thread)."""
        reason = f"hard time limit ({safe_text(limit)} s) exceeded: the worker killed the run"

        def end(job: Job, stale_owner: str) -> None:
            self.end_time_limited(job, stale_owner, reason, delay, republish)

        self._when_dead(job_id, end)

    def terminated(self, job_id: str) -> None:
        """``revoke(terminate=True)`` killed ``job_id``'s run: cancel it (in a thread)."""

        def end(job: Job, stale_owner: str) -> None:
            self._write(job, stale_owner, JobStatus.CANCELLED, None, None, "revoked (terminated)")

        self._when_dead(job_id, end)

    def end_time_limited(
        self,
        job: Job,
        stale_owner: str,
        reason: str,
        delay: Delay,
        republish: Republish,
    ) -> None:
        """Write ``retrying`` (and re-publish first) or ``failed`` for a killed run."""
        attempt = job.attempts_made
        kind = "TimeLimitExceeded"
        if job.cancel_requested_at is not None:  # asked to stop: never retried
            self._write(job, stale_owner, JobStatus.CANCELLED, None, None, f"cancelled; {reason}")
            return
        delay_ms = None if attempt >= job.max_attempts else delay(attempt)
        if delay_ms is None:  # no attempt left, or its task does not retry a killed run
            self._write(job, stale_owner, JobStatus.FAILED, kind, reason, f"{kind}: {reason}")
            return
        try:
            # first: a message that arrives before the write finds a dead holder and takes
            # over; a write without a message would leave the job waiting for nothing
            republish(job, delay_ms / 1000)
        except Exception as exc:
            failed = f"{reason}; its retry could not be published: {safe_text(exc)}"
            self._write(job, stale_owner, JobStatus.FAILED, kind, failed, f"{kind}: {failed}")
            return
        message = f"retry in {delay_ms} ms after {kind}: {reason}"
        self._write(job, stale_owner, JobStatus.RETRYING, kind, reason, message, delay_ms)

    def dead_run(self, job_id: str) -> tuple[Job, str] | None:
        """The job and the owner of its lease once that process (of this host) is gone;
        None when the job is not ``processing``, is held elsewhere, or its holder still
        runs after ``DEATH_WAIT_S``."""
        deadline = time.monotonic() + DEATH_WAIT_S
        while True:
            job = self.store.get(job_id)
            if job is None or job.status is not JobStatus.PROCESSING or not job.locked_by:
                return None
            if job.locked_by.rpartition(":")[0] != HOST_ID:
                return None  # held on another host: its lease decides
            stale = dead_holder(
                job.locked_by,
                host_id=HOST_ID,
                pid=os.getpid(),
                alive=process_alive,
                running_here=True,  # this process is alive, whatever it runs
            )
            if stale is not None:
                return job, stale
            if time.monotonic() > deadline:
                logger.warning(
                    "job %s: its killed run (%s) still runs after %.0f s; left to its lease",
                    job_id,
                    job.locked_by,
                    DEATH_WAIT_S,
                )
                return None
            time.sleep(_POLL_S)

    def _when_dead(self, job_id: str, end: Callable[[Job, str], None]) -> None:
        # The store's engines are made here, in the calling thread (the one that forks pool
        # children): made in the thread below, a child forked meanwhile would inherit
        # their lock held and hang at its first claim.
        self.store.connect()

        def run() -> None:
            try:
                found = self.dead_run(job_id)
                if found is not None:
                    end(*found)
            except StoreError as exc:
                logger.error("job %s: could not end its killed run: %s", job_id, exc)

        threading.Thread(
            target=run, name=f"celery-tracked-time-limits-{job_id}", daemon=True
        ).start()

    def _write(
        self,
        job: Job,
        stale_owner: str,
        status: JobStatus,
        error_type: str | None,
        error_message: str | None,
        message: str,
        delay_ms: int = 0,
    ) -> None:
        dead = DeadRun(
            seen_attempt=job.attempts_made,
            stale_owner=stale_owner,
            status=status,
            error_type=error_type,
            error_message=error_message,
            message=message,
            now=utcnow(),
            delay_ms=delay_ms,
        )
        written = self.store.end_dead_run(job.id, dead)
        if not written:  # a redelivery took over meanwhile: its run decides
            return
        level = logging.WARNING if status is JobStatus.RETRYING else logging.ERROR
        if status is JobStatus.CANCELLED:
            level = logging.WARNING
        self.hooks.after_transition(
            Transition.of(
                Event(status.value),
                job.id,
                f"job {job.id} {status.value} after attempt {job.attempts_made}/"
                f"{job.max_attempts}: {message}",
                queue=job.queue_name,
                job_type=job.job_type,
                attempt=job.attempts_made,
                level=level,
            )
        )
