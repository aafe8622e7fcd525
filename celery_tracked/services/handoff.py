"""A freed concurrency slot goes to the next job at once.

A delivery that finds its concurrency key full is re-published to look again later
(``core/limits.busy_key_countdown``: the longer the line, the later each looks, so the
broker's traffic stays bounded). So that a slot does not sit idle until the next look,
the run that frees it hands it on: once its outcome is written, the key's oldest waiting
job whose message is out (``HandoffStore.next_waiting``) gets its message published again
now. The copy that was waiting finds the job taken or done and is skipped; a handoff that
fails, or that another job wins, only leaves the slot to the waiting deliveries' looks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..core.attempt import Attempt
from ..core.errors import TrackedError
from ..core.hooks import Hooks
from ..core.jobs import Job
from ..core.ports import HandoffStore
from ..core.redact import holds_redacted, mask_url

logger = logging.getLogger("celery_tracked")


class KeyHandoff(Hooks):
    """After a keyed attempt's outcome is written, publish the key's next waiting job."""

    def __init__(self, store: HandoffStore, publish: Callable[[Job], None]) -> None:
        self.store = store
        self.publish = publish

    def after_attempt(self, attempt: Attempt) -> None:
        limits = attempt.run.limits
        if limits is None or limits.key is None or attempt.recorded is None:
            return  # not keyed, or its slot is still held (its lease lapses by itself)
        try:
            job = self.store.next_waiting(limits.key, attempt.job_id)
        except TrackedError as exc:
            logger.warning("concurrency key %r: next job not read: %s", limits.key, exc)
            return
        if job is None or holds_redacted(job.payload):
            return  # nobody waits; a redacted payload waits for its own message
        try:
            self.publish(job)
        except Exception as exc:  # its own waiting delivery still comes back
            logger.warning("job %s: slot handoff not published: %s", job.id, mask_url(str(exc)))
