"""``wait``: block until a job ends, woken by the notifier, the row the truth.

Subscribes first, then reads the row, so a transition between the two is never missed;
a notification wakes the wait at once, and a cap re-reads the row in case the notifier
lost one (a Redis restart), so waiting never depends on notifications alone.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..core.errors import GuardError, JobFailed, JobNotFound, WaitTimeout
from ..core.guard import Notifier, Subscription
from ..core.ports import Store

logger = logging.getLogger("celery_tracked")


def wait_for_end(
    store: Store, notifier: Notifier, job_id: str, timeout: float, reread_s: float
) -> Any:
    """The ended job's result (decoded ``result_json``).

    Raises:
        JobNotFound: no job has this id.
        JobFailed: the job ended ``failed`` or ``cancelled``.
        WaitTimeout: it had not ended after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    subscription = _subscribe(notifier, job_id)
    try:
        while True:
            job = store.get(job_id)
            if job is None:
                raise JobNotFound(f"no job {job_id}")
            if job.terminal:
                if job.status.value == "completed":
                    return job.result
                raise JobFailed(job)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"job {job_id} still {job.status} after {timeout} s")
            try:
                subscription.wait(min(remaining, reread_s))
            except GuardError as exc:  # Redis went away: poll the row instead
                # (said once for the process by the guard: ``guard.Health``)
                logger.debug("job %s: waiting without notifications: %s", job_id, exc)
                subscription.close()
                subscription = _Polling()
    finally:
        subscription.close()


def _subscribe(notifier: Notifier, job_id: str) -> Subscription:
    try:
        return notifier.subscribe(job_id)
    except GuardError as exc:  # the row is the truth: poll it while Redis is down
        logger.debug("job %s: waiting without notifications: %s", job_id, exc)
        return _Polling()


class _Polling:
    """A subscription that never hears anything: ``wait`` re-reads the row on its cap."""

    def wait(self, timeout: float) -> bool:
        time.sleep(max(0.0, timeout))
        return False

    def close(self) -> None:
        pass
