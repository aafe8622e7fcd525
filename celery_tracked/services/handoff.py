"""A freed concurrency slot goes to the key's next *due* waiting job at once.

A delivery that finds its concurrency key full is postponed: its message goes back to the
broker to look again later (``core/limits.busy_key_countdown``: the longer the line, the
later each looks, so the broker's traffic stays bounded). So that a freed slot does not
sit idle until a look finds it, the run that frees it hands it on: once its outcome is
written (``completed``, ``failed``, ``retrying``, or ``cancelled`` as asked), it reads the
key's waiting jobs that may take the slot (``HandOffStore.next_waiting``: due on the
database's clock, not past their deadline, not paused, their message out), oldest first,
or, for a task with a ``fairness_key``, round-robin from the fairness key after its own.
It hands the slot to the first with one conditional move (``HAND_SLOT``: under the key's
lock, while the key has a free slot, fenced by the revision read and the due time): the
job gets a new message revision, published now, and the slot is held for it
(``limits.HANDOFF_S``) so that no other waiting delivery takes it meanwhile. Its older
message, when it comes back, runs nothing (its revision is not the job's).

So two runs that end together never hand to the same job (the revision fence), a job is
never handed a slot before its due time (``DUE``), and the key never holds more than its
limit (``KEY_FREE`` counts a handed slot). A hand-off that fails (the database, the
broker, a worker killed between its outcome and its hand-off) only leaves the slot to the
waiting deliveries' looks; a handed job whose message is lost keeps its slot at most
``HANDOFF_S`` seconds, then the relay publishes it again. A task without a concurrency key
costs nothing here (no read, no write).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from ..core.attempt import Attempt
from ..core.hooks import Hooks
from ..core.jobs import Job, utcnow
from ..core.limits import DeliveryLimits
from ..core.ports import HandOffStore
from ..core.redact import mask_url
from .sealing import unsendable

logger = logging.getLogger("celery_tracked")


class SlotHandOff(Hooks):
    """After a keyed attempt's outcome is written, hand its slot to the next due job."""

    def __init__(self, store: HandOffStore, publish: Callable[[Job], None]) -> None:
        self.store = store
        self.publish = publish

    def after_attempt(self, attempt: Attempt) -> None:
        limits = attempt.run.limits
        if limits is None or limits.key is None or attempt.recorded is None:
            return  # not keyed, or its slot is still held (its lease lapses by itself)
        if attempt.run.inline:
            return  # eager mode: nothing waits in a broker
        try:
            self.hand_on(limits, attempt.job_id)
        except Exception as exc:  # the waiting deliveries' looks find the slot
            logger.warning(
                "concurrency key %r: freed slot not handed on: %s", limits.key, mask_url(str(exc))
            )

    def hand_on(self, limits: DeliveryLimits, ended: str) -> Job | None:
        """Hand the slot job ``ended`` freed to the next due waiting job of its key: the
        job it was handed to (its message published), or None."""
        assert limits.key is not None
        fairness = limits.fairness_key if limits.fair else None
        waiting = self.store.next_waiting(
            limits.key, ended, fair=limits.fair, fairness_key=fairness
        )
        for job in waiting:
            if unsendable(job):
                continue  # its redacted arguments are only in its own message
            handed = self.store.hand_slot(job, limits.limit, now=utcnow())
            if handed is None:
                continue  # another hand-off took it, or the key is full again
            # due on the database's clock (``DUE``): its message waits no more, whatever
            # this host's clock says (``send_job`` counts a due time on it)
            self.publish(replace(handed, not_before=None))
            self.store.handed_over(handed.id, utcnow(), handed.revision)
            logger.debug("job %s: handed the slot of concurrency key %r", handed.id, limits.key)
            return handed
        return None
