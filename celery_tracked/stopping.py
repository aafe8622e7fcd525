"""Cancelling a running job: ``Tracker.cancel(job_id, running=True)``.

1. A job still waiting (``pending``/``retrying``) is cancelled as by ``Tracker.cancel``.
2. A ``processing`` job gets a cancel request on its row (``store/cancels.py``): it stays
   ``processing`` while its run goes on, and from then on its run can only end it
   ``cancelled``, whatever the body does (returns, raises, asks for a retry).
3. The run is asked to stop:

   - **terminated** where the worker's pool can end one task (prefork; eventlet and
     gevent kill the green thread): the control command ``tracked_terminate`` (sent to
     the job's worker only) calls Celery's own ``Request.terminate`` (SIGTERM to the pool
     child). Celery's ``task_revoked(terminated=True)`` follows, and the worker's main
     process ends the job ``cancelled`` once the child is gone (``aftermath.py``). Unlike
     ``app.control.revoke(job_id, terminate=True)`` the job id is *not* added to the
     worker's revoked set, so a later ``Tracker.retry`` of the job is not discarded as
     revoked (Celery keeps revoked ids for 3 hours by default);
   - **cooperatively** everywhere, and the only way under ``-P threads`` and ``-P solo``
     (which cannot end one task): the body's ``self.cancelled()`` turns True
     (``progress.cancel_requested``) and the body returns or raises; its outcome write
     then ends the job ``cancelled`` (``Recorder.lost``). A body that never asks runs to
     its end, and the job still ends ``cancelled``.

4. A run that is already gone (its lease lapsed, or its process on this host is dead)
   is ended ``cancelled`` at once.
"""

from __future__ import annotations

import logging
import signal
from typing import TYPE_CHECKING, Any

from celery.concurrency.base import BasePool
from celery.worker import state as worker_state
from celery.worker.control import control_command

from .hooks import Transition
from .jobs import Event, Job, JobStatus, utcnow
from .lease import diagnose

if TYPE_CHECKING:
    from .tracker import Tracker

logger = logging.getLogger("celery_tracked")

#: The name of the worker's control command (``app.control.broadcast``).
COMMAND = "tracked_terminate"
_WAITING = (JobStatus.PENDING, JobStatus.RETRYING)


def cancel_running(tracker: Tracker, job_id: str, reason: str) -> bool:
    """``Tracker.cancel(job_id, reason, running=True)``: True when the job was cancelled
    or its run was asked to stop (it ends ``cancelled``), False when it is in another
    status (ended, or unknown)."""
    store = tracker.store
    for _ in range(3):  # a job may move between the two conditional moves: look again
        if tracker.cancel(job_id, reason):
            return True
        message = f"cancel requested while running: {reason}"
        if store.request_cancel(job_id, now=utcnow(), message=message):
            job = store.get(job_id)
            if job is not None:
                tracker.hooks.after_transition(
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
                stop(tracker, job)
            return True
        job = store.get(job_id)
        if job is None:
            return False
        if job.status is JobStatus.PROCESSING and job.cancel_requested_at is not None:
            stop(tracker, job)  # asked before: ask its run again (harmless)
            return True
        if job.status not in (*_WAITING, JobStatus.PROCESSING):
            return False
    return False


def stop(tracker: Tracker, job: Job) -> None:
    """End ``job``'s run now if it is gone, else ask its worker to terminate it."""
    leases = tracker.leases
    stale = leases.dead_holder(job)
    lease = diagnose(job, tracker.store.clock(), stale, leases.grace_seconds)
    if lease.lapsed:
        message = f"cancelled: its run was gone ({lease.why})"
        if tracker.store.end_dead_run(
            job.id,
            seen_attempt=job.attempts_made,
            stale_owner=lease.stale_owner,
            status=JobStatus.CANCELLED,
            error_type=None,
            error_message=None,
            message=message,
            now=utcnow(),
        ):
            tracker.hooks.after_transition(
                Transition.of(
                    Event.CANCELLED,
                    job.id,
                    f"job {job.id} {message}",
                    queue=job.queue_name,
                    job_type=job.job_type,
                    attempt=job.attempts_made,
                )
            )
        return
    try:
        tracker.app.control.broadcast(
            COMMAND,
            arguments={"job_id": job.id, "task_id": job.celery_task_id or job.id},
            destination=[job.worker] if job.worker else None,
        )
    except Exception as exc:  # the body's self.cancelled() and the fenced outcome remain
        logger.warning("job %s: could not ask its worker to terminate it: %s", job.id, exc)


def can_terminate(pool: Any) -> bool:
    """True when ``pool`` can end one task (prefork, eventlet, gevent); not threads/solo."""
    method = getattr(pool, "terminate_job", None)
    return method is not None and getattr(method, "__func__", None) is not BasePool.terminate_job


@control_command(args=[("job_id", str), ("task_id", str)], signature="<job_id> [task_id]")
def tracked_terminate(
    state: Any, job_id: str, task_id: str | None = None, **_: Any
) -> dict[str, str]:
    """Worker side: terminate the running task of ``job_id`` (Celery task ``task_id``,
    the job id unless a ``self.replace`` gave the job its own) if this pool can (its job
    then ends ``cancelled``); never marks the id revoked."""
    request = worker_state.requests.get(task_id or job_id)
    if request is None or request not in worker_state.active_requests:
        return {"ok": f"job {job_id} is not running here"}
    pool = state.consumer.pool
    if not can_terminate(pool):
        return {"ok": f"job {job_id}: this pool cannot terminate a task; its body is asked"}
    logger.info("terminating job %s (cancelled while running)", job_id)
    request.terminate(pool, signal=signal.SIGTERM)
    return {"ok": f"job {job_id} terminated"}
