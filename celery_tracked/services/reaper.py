"""The stalled-job reaper: finds the jobs nothing will move any more and rescues them
(``docs/operations.md``, "Stalled jobs: the reaper"): a whole worker died (its run under a
lease nobody renews, its prefetched messages given back only after ``visibility_timeout``),
the broker lost messages, a run was killed before its claim.

The judgement, in pure functions (``stall.py``):

1. :func:`stalled_why`: the row alone looks stalled. ``processing``: its lease lapsed
   (``lease.diagnose``, on the database's clock) ``tracked_reaper_processing_seconds``
   after it could be taken over; ``retrying``: due ``tracked_reaper_retrying_seconds``
   ago; ``pending``: handed to the broker ``tracked_reaper_pending_seconds`` ago. A
   delivery postponed behind a rate limit or a full concurrency key hands its message to
   the broker again and says so (``published_at``): a job waiting its turn never looks
   stalled while its deliveries come and go.
2. :func:`presumed_lost`: for a waiting job, and a run whose arguments were stored redacted
   (:func:`asks_broker`), the broker is asked too: a message a live worker holds is not
   lost, and of the others in one queue only as many as the queue's ready messages cannot
   account for are presumed lost (the oldest). If the broker cannot answer, none is.
3. A message presumed lost is taken as lost only when an earlier pass, at least
   ``confirm_s`` before, found it lost too and nothing happened to the job since (its
   latest event is that pass's ``missing``): a holder that missed one question (paused,
   busy) keeps its job. A pass that finds it again writes ``found``.
4. :func:`decide`: **rescue** (a new message revision, published, a ``rescued`` event; a
   late delivery of the old message runs nothing) while attempts remain and the job was
   rescued fewer than ``tracked_reaper_max_rescues`` times, else **abandon** (``failed``,
   ``error_type = "abandoned"``).

Each move is one conditional ``UPDATE`` fenced to the row as judged (``store/reaping.py``).
Knows nothing of Celery: the publish and the broker's answers come in (the wiring's
platform: ``rerun.publisher``, ``broker.py``).

A maintenance plugin (``maintenance.py``): ``Tracker.reap()``, the task
``celery_tracked.reap`` every ``tracked_reaper_interval_seconds``, ``celery tracked reap``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import ClassVar, Protocol

from ..core.fences import StaleRun, StallCutoffs
from ..core.hooks import Hooks, Transition
from ..core.jobs import Event, Job, JobStatus, utcnow
from ..core.ports import ReapingStore
from ..core.redact import mask_url
from ..core.settings import Settings
from .maintenance import Maintenance, Parts
from .sealing import NO_KEY_HERE, broken_seal, keyless, sealer_for
from .stall import (
    Action,
    Thresholds,
    asks_broker,
    decide,
    message_id,
    presumed_lost,
    stalled_why,
)

logger = logging.getLogger("celery_tracked")

#: Stalled-looking rows judged per pass, the oldest first: up to this many runs and as many
#: waiting jobs; the next pass takes the rest.
BATCH = 1000
ABANDONED = "abandoned"
#: The reaper's events of a message found nowhere (a first sighting), and found again.
MISSING, FOUND = Event.MISSING.value, Event.FOUND.value


class BrokerView(Protocol):
    """What the reaper asks the broker and its live workers (``broker.py``)."""

    def ready(self, queue: str) -> int | None:
        """How many messages wait in ``queue``, ready for a consumer (None: unknown)."""

    def held(self, message_ids: Sequence[str]) -> Collection[str] | None:
        """Which of ``message_ids`` a live worker holds: received, scheduled for a
        countdown/eta, or running (None: unknown)."""


@dataclass
class ReapReport:
    """What one pass of the reaper did, by job id."""

    #: sent again with a new message revision (``rescued`` event)
    rescued: list[str] = field(default_factory=list)
    #: ended ``failed`` with ``error_type = "abandoned"``
    abandoned: list[str] = field(default_factory=list)
    #: looked stalled but left alone: a live worker holds its message, the queue's ready
    #: messages may hold it, or the broker could not say
    left: list[str] = field(default_factory=list)
    #: rescued, but the publish failed (a pending one is the relay's; the next pass retries)
    unpublished: list[str] = field(default_factory=list)
    #: a stalled run a cancel was requested of (``Tracker.cancel(running=True)``): ended
    #: ``cancelled`` as asked
    cancelled: list[str] = field(default_factory=list)
    #: sealed arguments, and this process has no ``tracked_secret_key``: left alone for a
    #: reaper that has the key (also counted in ``left``)
    keyless: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "rescued": list(self.rescued),
            "abandoned": list(self.abandoned),
            "left": list(self.left),
            "unpublished": list(self.unpublished),
            "cancelled": list(self.cancelled),
        }


class Reaper(Maintenance):
    """Rescues or abandons the stalled jobs of one app's database."""

    name: ClassVar[str] = "reap"
    summary: ClassVar[str] = (
        'Rescue or abandon the stalled jobs (docs/operations.md, "Stalled jobs: the '
        'reaper"): one pass.'
    )
    idle: ClassVar[str] = "nothing stalled"
    moved: ClassVar[tuple[str, ...]] = ("rescued", "abandoned", "cancelled")

    def __init__(
        self,
        store: ReapingStore,
        hooks: Hooks,
        settings: Settings,
        publish: Callable[[Job], None],
        broker: BrokerView,
    ) -> None:
        self.store = store
        self.hooks = hooks
        self.limits = Thresholds.of(settings)
        self.sealer = sealer_for(settings.secret_key)
        self.publish = publish
        self.broker = broker

    @classmethod
    def schedule(cls, settings: Settings) -> float | None:
        return settings.reaper_interval_seconds or None

    @classmethod
    def build(cls, parts: Parts) -> Reaper:
        return cls(parts.store, parts.hooks, parts.settings, parts.publish, parts.platform)

    def run(self, now: datetime | None = None) -> ReapReport:
        """One pass over at most :data:`BATCH` stalled-looking runs and as many waiting jobs.

        ``now`` judges how long ago a job's last sign of life was (default: the database's
        clock); whether a lease lapsed (no live holder) is always judged on the database's.

        Raises:
            StoreError: the database failed (the next pass starts over).
        """
        db_now = self.store.clock()
        now = now or db_now
        limits, report = self.limits, ReapReport()
        cutoffs = StallCutoffs(
            grace_s=limits.lease_grace_s,
            run_cutoff=limits.cutoff(JobStatus.PROCESSING, now),
            pending_cutoff=limits.cutoff(JobStatus.PENDING, now),
            retrying_cutoff=limits.cutoff(JobStatus.RETRYING, now),
        )
        rows = self.store.stalled(cutoffs, BATCH)
        stalled: list[tuple[Job, int, str]] = []
        for job, rescues in rows:
            why = stalled_why(job, db_now=db_now, now=now, limits=limits)
            if why is not None:
                stalled.append((job, rescues, why))
        asked = [job for job, _, _ in stalled if asks_broker(job)]
        lost = self._confirmed(asked, self._lost(asked), now)
        for job, rescues, why in stalled:
            if asks_broker(job) and job.id not in lost:
                report.left.append(job.id)
                continue
            self._settle(job, rescues, why, now, report)
        if report.keyless:
            report.left.extend(report.keyless)
            logger.warning(
                "reaper: %d stalled job(s) with sealed arguments left alone: %s",
                len(report.keyless),
                NO_KEY_HERE,
            )
        if report.rescued or report.abandoned:  # each job was logged by its transition
            logger.warning(
                "reaper: %d rescued, %d abandoned, %d left alone, %d not published",
                len(report.rescued),
                len(report.abandoned),
                len(report.left),
                len(report.unpublished),
            )
        return report

    def _confirmed(self, asked: Sequence[Job], lost: list[Job] | None, now: datetime) -> set[str]:
        """Of the jobs presumed ``lost`` on this pass, those an earlier pass found lost too,
        at least ``confirm_s`` ago, with nothing happening to the job since (its latest
        event is that pass's ``missing``). Writes ``missing`` for the others (the first
        sighting), and ``found`` for a job marked missing whose message is accounted for
        now. ``lost`` None: the broker could not answer (nothing is written)."""
        if lost is None or not asked:
            return set()
        since = self.store.missing_since([job.id for job in asked])
        confirmed: set[str] = set()
        lost_ids = {job.id for job in lost}
        for job in asked:
            seen = since.get(job.id)
            if job.id not in lost_ids:
                if seen is not None:
                    self.store.note(job, FOUND, f"job {job.id}: its message was found", now)
                continue
            if seen is None:
                note = (
                    f"job {job.id}: its message is held by no live worker that answered "
                    "and not in its queue; rescued if the next pass finds it so"
                )
                self.store.note(job, MISSING, note, now)
            elif (now - seen).total_seconds() >= self.limits.confirm_s:
                confirmed.add(job.id)
        return confirmed

    def _lost(self, waiting: Sequence[Job]) -> list[Job] | None:
        """The jobs (``asks_broker``) whose message is presumed lost; None if the broker
        could not say. The ready counts are read before the held messages: a message moving
        from a queue to a worker in between is counted twice (a message re-published by a
        postponed delivery meanwhile is not missed either: the row says so, and the move
        is fenced by it)."""
        if not waiting:
            return []
        queues = sorted({job.queue_name for job in waiting})
        ready = {queue: self.broker.ready(queue) for queue in queues}
        held = self.broker.held([message_id(job) for job in waiting])
        if held is None or None in ready.values():
            logger.warning("reaper: the broker could not say which messages it holds")
            return None
        lost: list[Job] = []
        for queue in queues:
            mine = [job for job in waiting if job.queue_name == queue]
            lost.extend(presumed_lost(mine, held, ready[queue]))
        return lost

    def _settle(
        self,
        job: Job,
        rescues: int,
        why: str,
        now: datetime,
        report: ReapReport,
    ) -> None:
        if job.status is JobStatus.PROCESSING and job.cancel_requested_at is not None:
            self._cancel(job, now, f"job {job.id} stalled: {why}; cancelled as requested", report)
            return
        broken = broken_seal(job, self.sealer)
        decision = decide(job, rescues, self.limits, broken)
        if decision.why == broken and keyless(job, self.sealer):
            report.keyless.append(job.id)  # a reaper with the key rescues it
            return
        message = f"job {job.id} stalled: {why}; {decision.why}"
        if decision.action is Action.ABANDON:
            if self._abandon(job, now, message):
                report.abandoned.append(job.id)
                self._tell(job, Event.FAILED, JobStatus.FAILED, message, logging.ERROR)
            return
        if not self._rescue(job, now, message):
            return  # it moved meanwhile (a late delivery, another reaper)
        target = JobStatus.RETRYING if job.status is JobStatus.PROCESSING else job.status
        sent = replace(job, status=target, revision=job.revision + 1)
        report.rescued.append(job.id)
        self._tell(job, Event.RESCUED, target, message, logging.WARNING)
        try:
            self.publish(sent)
        except Exception as exc:
            logger.warning("reaper could not publish job %s: %s", job.id, mask_url(str(exc)))
            report.unpublished.append(job.id)
            return
        if target is JobStatus.PENDING:
            self.store.handed_over(job.id, utcnow(), sent.revision)

    def _cancel(self, job: Job, now: datetime, message: str, report: ReapReport) -> None:
        if self.store.cancel_stalled_run(job, self._stale(job, now, message)):
            report.cancelled.append(job.id)
            self._tell(job, Event.CANCELLED, JobStatus.CANCELLED, message, logging.WARNING)

    def _rescue(self, job: Job, now: datetime, message: str) -> bool:
        if job.status is JobStatus.PROCESSING:
            return self.store.rescue_run(job, self._stale(job, now, message))
        cutoff = self.limits.cutoff(job.status, now)
        return self.store.rescue_waiting(job, cutoff=cutoff, message=message, now=utcnow())

    def _abandon(self, job: Job, now: datetime, message: str) -> bool:
        exhausted = job.attempts_made >= job.max_attempts
        if job.status is JobStatus.PROCESSING:
            return self.store.abandon_run(job, self._stale(job, now, message), exhausted)
        cutoff = self.limits.cutoff(job.status, now)
        return self.store.abandon_waiting(
            job, cutoff=cutoff, message=message, now=utcnow(), retries_exhausted=exhausted
        )

    def _stale(self, job: Job, now: datetime, message: str) -> StaleRun:
        """The fence of a stalled run's move (its cutoff as of ``now``)."""
        cutoff = self.limits.cutoff(job.status, now)
        return StaleRun(self.limits.lease_grace_s, cutoff, message, utcnow())

    def _tell(self, job: Job, event: Event, status: JobStatus, message: str, level: int) -> None:
        details = {"error_type": ABANDONED} if status is JobStatus.FAILED else {}
        self.hooks.after_transition(
            Transition.of(
                event,
                job.id,
                message,
                status=status,
                queue=job.queue_name,
                job_type=job.job_type,
                attempt=job.attempts_made,
                level=level,
                details=details,
            )
        )
