"""Stopping a running job, the Celery side of ``Tracker.cancel(job_id, running=True)``
(``cancelling.py`` holds the rest: the cancel request on the row, a run already gone).

The run is asked to stop:

- **terminated** where the worker's pool can end one task (prefork; eventlet and gevent
  kill the green thread): the control command ``tracked_terminate`` (sent to the job's
  worker only, by :func:`ask_to_terminate`) calls Celery's own ``Request.terminate``
  (SIGTERM to the pool child). Celery's ``task_revoked(terminated=True)`` follows, and
  the worker's main process ends the job ``cancelled`` once the child is gone
  (``time_limits.py``). Unlike ``app.control.revoke(job_id, terminate=True)`` the job id is
  *not* added to the worker's revoked set, so a later ``Tracker.retry`` of the job is not
  discarded as revoked (Celery keeps revoked ids for 3 hours by default);
- **cooperatively** everywhere, and the only way under ``-P threads`` and ``-P solo``
  (which cannot end one task): the body's ``self.cancelled()`` turns True
  (``progress.cancel_requested``) and the body returns or raises; its outcome write then
  ends the job ``cancelled`` (``OutcomeWriter.lost``). A body that never asks runs to its end,
  and the job still ends ``cancelled``.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from celery import Celery
from celery.concurrency.base import BasePool
from celery.worker import state as worker_state
from celery.worker.control import control_command

from ..core.jobs import Job

logger = logging.getLogger("celery_tracked")

#: The name of the worker's control command (``app.control.broadcast``).
COMMAND = "tracked_terminate"


def ask_to_terminate(app: Celery, job: Job) -> None:
    """Ask the worker running ``job`` to terminate it (best effort: the body's
    ``self.cancelled()`` and the fenced outcome remain)."""
    try:
        app.control.broadcast(
            COMMAND,
            arguments={"job_id": job.id, "task_id": job.celery_task_id or job.id},
            destination=[job.worker] if job.worker else None,
        )
    except Exception as exc:
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
