"""Cancelling: ``Tracker.cancel`` (:class:`Canceller`), and a running job (:class:`Stopper`).

1. A job still waiting (``pending``/``retrying``) is cancelled as by ``Tracker.cancel``.
2. A ``processing`` job gets a cancel request on its row (``store/rerun.py``): it stays
   ``processing`` while its run goes on, and from then on its run can only end it
   ``cancelled``, whatever the body does (returns, raises, asks for a retry).
3. The run is asked to stop: terminated where the worker's pool can end one task, and
   cooperatively everywhere (the body's ``self.cancelled()`` turns True); how the Celery
   adapter does it: ``stopping.py``, reached through the platform port (``platform.py``).
4. A run that is already gone (its lease lapsed, or its process on this host is dead)
   is ended ``cancelled`` at once.

Knows nothing of Celery.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from ..core.fences import DeadRun
from ..core.hooks import Hooks, Transition
from ..core.jobs import Event, Job, JobStatus, utcnow
from ..core.ports import CancelStore
from .lease import LeaseKeeper, diagnose

_WAITING = (JobStatus.PENDING, JobStatus.RETRYING)


class Shown(NamedTuple):
    """How a cancel is told (``Tracker.cancel``'s keywords): its log message (default:
    from the reason), the log's and the metrics' labels (read from the row when not
    given), the log level."""

    message: str | None = None
    queue: str | None = None
    job_type: str | None = None
    level: int = logging.INFO


class Canceller:
    """``Tracker.cancel``'s waiting case: pending | retrying → cancelled, told to the
    hooks (the relay's cancel of a row it cannot send too)."""

    def __init__(self, store: CancelStore, hooks: Hooks) -> None:
        self.store = store
        self.hooks = hooks

    def __call__(
        self,
        job_id: str,
        reason: str = "cancelled",
        *,
        revision: int | None = None,
        shown: Shown | None = None,
        error_type: str | None = None,
    ) -> bool:
        """False if the job is in any other status; ``revision`` as ``Tracker.cancel``'s;
        ``error_type``: why, when the library cancels it (``UnknownTask``)."""
        cancelled = self.store.cancel(
            job_id, now=utcnow(), reason=reason, revision=revision, error_type=error_type
        )
        if cancelled:
            message, queue, job_type, level = Shown() if shown is None else shown
            message = message or f"job {job_id} cancelled: {reason}"
            if queue is None or job_type is None:  # the log's and the metrics' labels
                job = self.store.get(job_id)
                queue = queue if job is None else queue or job.queue_name
                job_type = job_type if job is None else job_type or job.job_type
            self.hooks.after_transition(
                Transition.of(Event.CANCELLED, job_id, message, None, queue, job_type, level=level)
            )
        return cancelled


class Stopper:
    """Cancels running jobs of one app: ``cancel`` is ``Tracker.cancel``'s waiting case,
    ``terminate`` asks a job's worker to end its run (``Platform.terminate``)."""

    def __init__(
        self,
        store: CancelStore,
        hooks: Hooks,
        leases: LeaseKeeper,
        cancel: Callable[[str, str], bool],
        terminate: Callable[[Job], None],
    ) -> None:
        self.store = store
        self.hooks = hooks
        self.leases = leases
        self.cancel = cancel
        self.terminate = terminate

    def cancel_running(self, job_id: str, reason: str) -> bool:
        """``Tracker.cancel(job_id, reason, running=True)``: True when the job was
        cancelled or its run was asked to stop (it ends ``cancelled``), False when it is
        in another status (ended, or unknown)."""
        store = self.store
        for _ in range(3):  # a job may move between the two conditional moves: look again
            if self.cancel(job_id, reason):
                return True
            message = f"cancel requested while running: {reason}"
            if store.request_cancel(job_id, now=utcnow(), message=message):
                job = store.get(job_id)
                if job is not None:
                    self.hooks.after_transition(
                        Transition.of(
                            Event.CANCEL_REQUESTED,
                            job_id,
                            f"job {job_id} {message}",
                            status=JobStatus.PROCESSING,
                            queue=job.queue_name,
                            job_type=job.job_type,
                            attempt=job.attempts_made,
                        )
                    )
                    self.stop(job)
                return True
            job = store.get(job_id)
            if job is None:
                return False
            if job.status is JobStatus.PROCESSING and job.cancel_requested_at is not None:
                self.stop(job)  # asked before: ask its run again (harmless)
                return True
            if job.status not in (*_WAITING, JobStatus.PROCESSING):
                return False
        return False

    def stop(self, job: Job) -> None:
        """End ``job``'s run now if it is gone, else ask its worker to terminate it."""
        leases = self.leases
        stale = leases.dead_holder(job)
        lease = diagnose(job, self.store.clock(), stale, leases.grace_seconds)
        if not lease.lapsed:
            self.terminate(job)
            return
        message = f"cancelled: its run was gone ({lease.why})"
        dead = DeadRun.cancelled(job.attempts_made, lease.stale_owner, message, utcnow())
        if self.store.end_dead_run(job.id, dead):
            self.hooks.after_transition(
                Transition.of(
                    Event.CANCELLED,
                    job.id,
                    f"job {job.id} {message}",
                    queue=job.queue_name,
                    job_type=job.job_type,
                    attempt=job.attempts_made,
                )
            )
