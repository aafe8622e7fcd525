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
    moved: ClassVar[tuple[str, ...]] = ("published", "cancelled")

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
        due first), each with the rest of its countdown.

        ``now`` is the database's clock (``store.clock()``), never this host's. ``now=``
        judges at another time: one *ahead* of the database's clock fast-forwards (tests,
        a dry run of tomorrow): each row it publishes is moved as far forward, its due time
        by ``now`` less the database's clock (in the claim's ``UPDATE``), and its message
        waits the rest of that; one behind it publishes less, never late (the rest of the
        wait is counted on the database's clock). So no message ever waits in the broker
        longer than the horizon.

        Raises:
            StoreError: the database failed (the next pass starts over).
        """
        clock = self.store.clock()
        now = now or clock
        ahead = max(now - clock, timedelta(0))  # a fast-forward's span
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
            moved = seen.not_before - ahead if ahead and seen.not_before is not None else None
            if not self.store.relay_claim(
                seen.id, owner=owner, now=now, lease_s=CLAIM_S, cutoff=until, moved_due=moved
            ):
                continue  # taken by another pass, or moved meanwhile
            job = self.store.get(seen.id)
            if self._unchanged(seen, job, until):
                assert job is not None
                why = None if moved is None else fast_forwarded(seen, moved, now)
                self._relay(job, owner, report, clock, why)  # the wait: on the database's clock
        return report

    @staticmethod
    def _unchanged(seen: Job, job: Job | None, until: datetime) -> bool:
        """The claimed row is still the held message read, due within the horizon (else
        a debounce or a retry replaced it: its claim lapses, nobody waits for it)."""
        if job is None or job.revision != seen.revision or job.published_at is not None:
            return False
        return job.not_before is not None and job.not_before <= until

    def _handed(self, job: Job, owner: str, sent: datetime, why: str | None = None) -> bool:
        """Mark the claimed row published (its event, ``scheduled``; ``why``: a fast-forward's
        text)."""
        message = why or SCHEDULED_MESSAGE
        logger.info("job %s %s", job.id, message)
        return self.store.scheduled(
            job.id, owner=owner, now=sent, message=message, revision=job.revision
        )


def fast_forwarded(job: Job, moved: datetime, now: datetime) -> str:
    """The ``scheduled`` event of a row a fast-forwarded pass published."""
    was = "?" if job.not_before is None else job.not_before.isoformat()
    return (
        f"published by the scheduler pass fast-forwarded to {now.isoformat()} (now=): its "
        f"due time moved from {was} to {moved.isoformat()}"
    )
