"""The scheduler pass: publish the held jobs as they come due.

A job enqueued with a ``countdown``/``eta`` (or a debounce's delay) due further ahead than
``tracked_schedule_horizon_seconds`` is *held*: its row is created ``pending`` with its due
time (``not_before``) and no message (``deadlines.py``, ``enqueue.py``). Celery's own
countdown would keep it in the broker and in a worker's memory all that time (with the
Redis transport, a countdown longer than ``visibility_timeout`` is delivered again while
the first copy still waits; docs/scheduling.md).

Each pass reads the held rows due within the horizon (the partial index
``ix_background_jobs_held_due``), takes each with the relay's claim (one conditional
``UPDATE``: passes may run in many processes at once, a row goes to one of them), and
publishes it with the rest of its countdown counted on the database's clock, then marks it
handed over (a ``scheduled`` event). A held row past its deadline is cancelled
(``DeadlineExceeded``) instead. A row whose due time is within the horizon but whose
producer may be publishing it right now (written less than ``tracked_relay_grace_seconds``
ago, and not held when written) is left to its producer, or to the relay once it is due.

A maintenance plugin (``maintenance.py``): ``Tracker.schedule()``, the task
``celery_tracked.schedule`` every ``tracked_schedule_interval_seconds``,
``celery tracked schedule``.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import ClassVar

from ..core.deadlines import held_row, past_deadline
from ..core.jobs import Job
from ..core.ports import ScheduleStore
from ..core.settings import Settings
from .lease import owner_id
from .maintenance import Parts
from .relay import CLAIM_S, Relay, RelayReport

logger = logging.getLogger("celery_tracked")

SCHEDULED_MESSAGE = "published by the scheduler pass: its due time came within the horizon"


class Scheduler(Relay):
    """Publishes held rows as they come within the horizon (the relay's send and claim)."""

    name: ClassVar[str] = "schedule"
    summary: ClassVar[str] = (
        "Publish the held jobs (due further ahead than tracked_schedule_horizon_seconds) "
        "as they come within it, with the rest of their countdown; cancel those past "
        "their deadline (docs/scheduling.md): one pass."
    )
    idle: ClassVar[str] = "nothing to schedule"

    store: ScheduleStore

    def __init__(self, store: ScheduleStore, horizon_s: float, grace_s: float, parts: Parts):
        keyed = bool(parts.settings.secret_key)
        super().__init__(store, grace_s, parts.cancel, parts.publish, keyed, parts.hooks)
        self.store = store
        self.horizon_s = horizon_s

    @classmethod
    def schedule(cls, settings: Settings) -> float | None:
        return settings.schedule_interval_seconds or None

    @classmethod
    def build(cls, parts: Parts) -> Scheduler:
        settings = parts.settings
        horizon, grace = settings.schedule_horizon_seconds, settings.relay_grace_seconds
        return cls(parts.store, horizon, grace, parts)

    def run(self, now: datetime | None = None) -> RelayReport:
        """One pass: publish every held row due before ``now`` + the horizon (at most 100,
        due first), each with the rest of its countdown from ``now``.

        ``now`` is the database's clock (``store.clock()``), never this host's; ``now=``
        stands for another time to judge by (tests, a fast-forward): a message published
        early waits the rest of its due time in the worker (the claim is fenced by it).

        Raises:
            StoreError: the database failed (the next pass starts over).
        """
        now = now or self.store.clock()
        owner = f"schedule:{owner_id()}:{uuid.uuid4().hex[:8]}"
        recent = now - timedelta(seconds=self.grace_s)
        until = now + timedelta(seconds=self.horizon_s)
        report = RelayReport()
        for seen in self.store.held_due(until=until):
            if past_deadline(seen, now) and self._expire(seen):
                report.cancelled.append(seen.id)
                continue
            if not held_row(seen, self.horizon_s) and seen.updated_at >= recent:
                continue  # near-due when written: its producer publishes it (else the relay)
            if not self.keyed and seen.secrets_sealed is not None:
                report.left.append(seen.id)  # a pass with the key sends it
                continue
            if not self.store.relay_claim(
                seen.id, owner=owner, now=now, lease_s=CLAIM_S, cutoff=until
            ):
                continue  # taken by another pass, or moved meanwhile
            job = self.store.get(seen.id)
            if self._unchanged(seen, job, until):
                assert job is not None
                self._relay(job, owner, report, now)
        return report

    @staticmethod
    def _unchanged(seen: Job, job: Job | None, until: datetime) -> bool:
        """The claimed row is still the held message read, due within the horizon (else
        a debounce or a retry replaced it: its claim lapses, nobody waits for it)."""
        if job is None or job.revision != seen.revision or job.published_at is not None:
            return False
        return job.not_before is not None and job.not_before <= until

    def _handed(self, job: Job, owner: str, sent: datetime, why: str | None = None) -> bool:
        """Mark the claimed row published (its event, ``scheduled``)."""
        logger.info("job %s %s", job.id, SCHEDULED_MESSAGE)
        return self.store.scheduled(
            job.id, owner=owner, now=sent, message=SCHEDULED_MESSAGE, revision=job.revision
        )
